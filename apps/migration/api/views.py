"""Migration API: plans (staff write), dual-track services with shift / rollback / promote commands,
their action history, measurement ingestion, and the cockpit's figures (vendor share, footprint)."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.permissions import IsStaffOrReadOnly
from apps.core.errors import ValidationFailed
from apps.jobs.selectors import job_list
from apps.migration import exports, selectors, services
from apps.migration.api import serializers as s
from apps.migration.filtersets import (
    AccuracyEvalFilterSet,
    GateFilterSet,
    MigratedServiceFilterSet,
    MigrationActionFilterSet,
    PlanPhaseFilterSet,
    ServiceMetricFilterSet,
)
from apps.migration.models import Gate, PlanPhase

DAYS_PARAM = OpenApiParameter("days", OpenApiTypes.INT, description="1–90, default 7")


def days_param(request, default: int = 7) -> int:
    raw = request.query_params.get("days", default)
    try:
        days = int(raw)
    except (TypeError, ValueError):
        raise ValidationFailed(
            _("days must be a whole number."), details={"days": ["not a number"]}
        ) from None
    if not 1 <= days <= 90:
        raise ValidationFailed(_("days must be between 1 and 90."), details={"days": ["between 1 and 90"]})
    return days


class MigrationPlanViewSet(viewsets.ModelViewSet):
    """Migration plans: source → target vendors, phases with dates and owners, gates. Staff write."""

    serializer_class = s.MigrationPlanSerializer
    permission_classes = [IsStaffOrReadOnly]
    ordering_fields = ["name", "created_at"]

    def get_queryset(self):
        return selectors.plan_list(user=self.request.user)

    def create(self, request, *args, **kwargs):
        data = s.MigrationPlanSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        plan = services.plan_create(actor=request.user, **data.validated_data)
        return Response(s.MigrationPlanSerializer(plan).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        plan = self.get_object()
        data = s.MigrationPlanSerializer(plan, data=request.data, partial=kwargs.get("partial", False))
        data.is_valid(raise_exception=True)
        fields = {k: v for k, v in data.validated_data.items() if k not in ("phases", "gates")}
        plan = services.plan_update(plan=plan, actor=request.user, **fields)
        return Response(s.MigrationPlanSerializer(plan).data)

    def destroy(self, request, *args, **kwargs):
        services.plan_delete(plan=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class _StaffWrittenViewSet(viewsets.ModelViewSet):
    permission_classes = [IsStaffOrReadOnly]
    write = None

    def perform_create(self, serializer):
        serializer.instance = type(self).write(
            obj=serializer.Meta.model(**serializer.validated_data), actor=self.request.user
        )

    def perform_update(self, serializer):
        obj = serializer.instance
        for key, value in serializer.validated_data.items():
            setattr(obj, key, value)
        serializer.instance = type(self).write(obj=obj, actor=self.request.user)

    def perform_destroy(self, instance):
        services.object_delete(obj=instance, actor=self.request.user)


class PlanPhaseViewSet(_StaffWrittenViewSet):
    serializer_class = s.PlanPhaseSerializer
    filterset_class = PlanPhaseFilterSet

    @staticmethod
    def write(*, obj: PlanPhase, actor):
        return services.plan_phase_save(phase=obj, actor=actor)

    def get_queryset(self):
        return selectors.phase_list(user=self.request.user)


class GateViewSet(_StaffWrittenViewSet):
    serializer_class = s.GateSerializer
    filterset_class = GateFilterSet

    @staticmethod
    def write(*, obj: Gate, actor):
        return services.gate_save(gate=obj, actor=actor)

    def get_queryset(self):
        return selectors.gate_list(user=self.request.user)


class MigratedServiceViewSet(
    mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet
):
    """Dual-track services. Members see and steer their projects' services; staff all of them."""

    serializer_class = s.MigratedServiceSerializer
    filterset_class = MigratedServiceFilterSet
    ordering_fields = ["name", "phase", "target_weight", "created_at"]
    search_fields = ["name"]

    def get_queryset(self):
        return selectors.service_list(user=self.request.user)

    @extend_schema(request=s.MigratedServiceCreateSerializer, responses={201: s.MigratedServiceSerializer})
    def create(self, request, *args, **kwargs):
        data = s.MigratedServiceCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        visible = job_list(user=request.user)
        for name in ("source_job", "target_job"):
            if not visible.filter(pk=fields[name].pk).exists():
                raise ValidationFailed(
                    _("No such job: %(job)s.") % {"job": fields[name].pk}, details={name: ["no such job"]}
                )
        service = services.service_create(actor=request.user, **fields)
        return Response(s.MigratedServiceSerializer(service).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, *args, **kwargs):
        services.service_delete(service=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.ShiftSerializer, responses=s.MigrationActionSerializer)
    @action(detail=True, methods=["post"])
    def shift(self, request, pk=None):
        """Shift traffic a step (or to explicit weights that add up to 100) towards the target track;
        both Deployments are re-applied through the outbox."""
        data = s.ShiftSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        done = services.service_shift(service=self.get_object(), actor=request.user, **data.validated_data)
        return Response(s.MigrationActionSerializer(done).data)

    @extend_schema(request=s.RollbackSerializer, responses=s.MigrationActionSerializer)
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        """Send traffic back to the source track (all of it unless ``target_weight`` says otherwise)."""
        data = s.RollbackSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        done = services.service_rollback(service=self.get_object(), actor=request.user, **data.validated_data)
        return Response(s.MigrationActionSerializer(done).data)

    @extend_schema(request=s.PromoteSerializer, responses=s.MigrationActionSerializer)
    @action(detail=True, methods=["post"])
    def promote(self, request, pk=None):
        """Move to the next phase when every gate of the current one passes (409 with the reasons)."""
        data = s.PromoteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        done = services.service_promote(service=self.get_object(), actor=request.user, **data.validated_data)
        return Response(s.MigrationActionSerializer(done).data)

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["post"])
    def evaluate(self, request, pk=None):
        """Evaluate the gates of the current phase now (stored on the service)."""
        service = self.get_object()
        services.require_writer(request.user, service.project)
        results = services.service_gates_evaluate(service=service, actor=request.user)
        return Response({"gate_status": service.gate_status, "gates": results})

    @extend_schema(parameters=[DAYS_PARAM], responses=s.ComparisonSerializer)
    @action(detail=True, methods=["get"])
    def comparison(self, request, pk=None):
        """Throughput, p99, error rate, cost per 1,000 requests side by side per track."""
        end = timezone.now()
        start = end - timedelta(days=days_param(request))
        tracks = selectors.track_comparison(service=self.get_object(), start=start, end=end)
        return Response(s.ComparisonSerializer({"start": start, "end": end, "tracks": tracks}).data)

    @extend_schema(parameters=[DAYS_PARAM], responses={(200, "text/csv"): OpenApiTypes.STR})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request):
        """The services (filtered like the list) with both tracks' figures, as CSV."""
        end = timezone.now()
        start = end - timedelta(days=days_param(request))
        rows = list(self.filter_queryset(self.get_queryset()))
        response = HttpResponse(exports.services_csv(rows, start=start, end=end), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="migration-services.csv"'
        return response


class MigrationActionViewSet(viewsets.ReadOnlyModelViewSet):
    """Every shift / rollback / promote, with its actor."""

    serializer_class = s.MigrationActionSerializer
    filterset_class = MigrationActionFilterSet

    def get_queryset(self):
        return selectors.action_list(user=self.request.user)


class ServiceMetricViewSet(viewsets.ReadOnlyModelViewSet):
    """Per-track request windows (requests, errors, p99) as the services export them. POST a batch."""

    serializer_class = s.ServiceMetricSerializer
    filterset_class = ServiceMetricFilterSet

    def get_queryset(self):
        return selectors.metric_list(user=self.request.user)

    @extend_schema(request=s.MetricIngestSerializer, responses={201: s.IngestResultSerializer})
    def create(self, request, *args, **kwargs):
        data = s.MetricIngestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        service = selectors.service_for_user(user=request.user, pk=data.validated_data["service"].pk)
        result = services.service_metrics_ingest(
            service=service, samples=list(data.validated_data["samples"]), actor=request.user
        )
        return Response(result, status=status.HTTP_201_CREATED)


class AccuracyEvalViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Accuracy measurements of training tracks, with where each came from."""

    serializer_class = s.AccuracyEvalSerializer
    filterset_class = AccuracyEvalFilterSet

    def get_queryset(self):
        return selectors.accuracy_list(user=self.request.user)

    def create(self, request, *args, **kwargs):
        data = s.AccuracyEvalSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        service = selectors.service_for_user(user=request.user, pk=fields.pop("service").pk)
        row = services.accuracy_eval_record(service=service, actor=request.user, **fields)
        return Response(s.AccuracyEvalSerializer(row).data, status=status.HTTP_201_CREATED)


class DashboardViewSet(viewsets.ViewSet):
    """The cockpit's figures, scoped to what the user may see."""

    @extend_schema(
        parameters=[OpenApiParameter("months", OpenApiTypes.INT, description="1–36, default 12")],
        responses=s.VendorShareMonthSerializer(many=True),
    )
    @action(detail=False, methods=["get"], url_path="vendor-share")
    def vendor_share(self, request):
        """Compute-unit-hours and amounts by vendor per month, from the billing ledger (amounts add
        up to the ledger's month total to the cent)."""
        try:
            months = int(request.query_params.get("months", 12))
        except ValueError:
            raise ValidationFailed(
                _("months must be a whole number."), details={"months": ["not a number"]}
            ) from None
        if not 1 <= months <= 36:
            raise ValidationFailed(
                _("months must be between 1 and 36."), details={"months": ["between 1 and 36"]}
            )
        rows = selectors.vendor_share_by_month(user=request.user, months=months)
        return Response(s.VendorShareMonthSerializer(rows, many=True).data)

    @extend_schema(responses=s.FootprintSerializer(many=True))
    @action(detail=False, methods=["get"])
    def footprint(self, request):
        """Cards and compute units held now, per vendor (fleet cards for staff)."""
        return Response(s.FootprintSerializer(selectors.footprint(user=request.user), many=True).data)
