"""Telemetry API: metric sources and rollups (staff), exporter scrape upload (staff), reports.

Fleet-wide reports are staff-only (403 otherwise); job and project utilization follow job / project
visibility (404 for what a user cannot see). Every report answers JSON, or CSV with ``?format=csv``.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.pagination import EstimatedCountPagination
from apps.core.api.permissions import IsStaff, IsUser
from apps.core.errors import ValidationFailed
from apps.telemetry import exports, ingest, metric_sources, selectors
from apps.telemetry.api import serializers as s
from apps.telemetry.filtersets import DeviceRollupFilterSet, MetricSourceFilterSet
from apps.telemetry.models import DeviceRollup, MetricSource

ID_PARAM = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH)

PERIOD_PARAMS = [
    OpenApiParameter("start", OpenApiTypes.DATETIME, description="window start (default: end − 24 h)"),
    OpenApiParameter("end", OpenApiTypes.DATETIME, description="window end (default: now)"),
    OpenApiParameter("source", OpenApiTypes.STR, description="only rollups from this source"),
    OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"]),
]


def _report(body) -> dict:
    """The responses of a report: JSON ``body``, or CSV with ``?format=csv``."""
    return {(200, "application/json"): body, (200, "text/csv"): OpenApiTypes.STR}


REPORT_OBJECT = _report(OpenApiTypes.OBJECT)
REPORT_ROWS = _report({"type": "array", "items": {"type": "object", "additionalProperties": {}}})


def _respond(request, name: str, report, filename: str):
    fmt = request.query_params.get("format", "json")
    if fmt not in ("json", "csv"):
        raise ValidationFailed(
            f"Unknown format {fmt!r}; use json or csv.", details={"format": ["json", "csv"]}
        )
    if fmt == "csv":
        return exports.csv_response(name, report, filename)
    return Response(report)


def _period(request, prefix: str = "", default_hours: int = 24) -> selectors.Period:
    q = request.query_params
    return selectors.period_parse(
        q.get(f"{prefix}start"), q.get(f"{prefix}end"), default_hours=default_hours, prefix=prefix
    )


class MetricSourceViewSet(viewsets.ModelViewSet):
    serializer_class = s.MetricSourceSerializer
    filterset_class = MetricSourceFilterSet
    permission_classes = [IsStaff]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return MetricSource.objects.none()
        return selectors.metric_source_list(user=self.request.user)

    def perform_create(self, serializer):
        serializer.instance = metric_sources.metric_source_create(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer):
        serializer.instance = metric_sources.metric_source_update(
            actor=self.request.user, source=serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        metric_sources.metric_source_delete(actor=self.request.user, source=instance)


class DeviceRollupViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.DeviceRollupSerializer
    filterset_class = DeviceRollupFilterSet
    pagination_class = EstimatedCountPagination  # an append-only ledger of millions of rows
    permission_classes = [IsStaff]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return DeviceRollup.objects.none()
        return selectors.rollup_list(user=self.request.user)


class ScrapeViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    """Upload one exporter page (Prometheus text format); the answer is the ingest report."""

    serializer_class = s.ScrapeInputSerializer
    permission_classes = [IsStaff]

    @extend_schema(request=s.ScrapeInputSerializer, responses=OpenApiTypes.OBJECT)
    def create(self, request, *args, **kwargs):
        data = s.ScrapeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        report, conversion = ingest.scrape_ingest(
            text=v["text"],
            at=v.get("at"),
            cluster=v.get("cluster"),
            source=v["source"],
            actor=request.user,
            dry_run=v["dry_run"],
        )
        body = report.as_dict()
        if v["dry_run"]:
            body["samples"] = [x.as_dry_run() for x in conversion.samples]
        return Response(body, status=status.HTTP_200_OK if v["dry_run"] else status.HTTP_201_CREATED)


class ReportViewSet(viewsets.ViewSet):
    """Fleet-wide reports (staff)."""

    permission_classes = [IsUser]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        # Permission before parsing: a member gets the 403, never an answer about the query string.
        selectors.require_staff(request.user)

    @extend_schema(
        parameters=[
            *PERIOD_PARAMS,
            OpenApiParameter("group_by", OpenApiTypes.STR, enum=list(selectors.GROUPS)),
        ],
        responses=REPORT_OBJECT,
    )
    @action(detail=False, methods=["get"])
    def fleet(self, request):
        report = selectors.fleet_utilization(
            user=request.user,
            period=_period(request),
            group_by=request.query_params.get("group_by", "vendor"),
            source=request.query_params.get("source") or None,
        )
        return _respond(request, "fleet", report, "fleet-utilization.csv")

    @extend_schema(parameters=PERIOD_PARAMS, responses=REPORT_ROWS)
    @action(detail=False, methods=["get"], url_path="top-nodes")
    def top_nodes(self, request):
        report = selectors.top_nodes(
            user=request.user, period=_period(request), source=request.query_params.get("source") or None
        )
        return _respond(request, "top-nodes", report, "top-nodes.csv")

    @extend_schema(
        parameters=[*PERIOD_PARAMS, OpenApiParameter("threshold", OpenApiTypes.FLOAT)],
        responses=REPORT_ROWS,
    )
    @action(detail=False, methods=["get"], url_path="idle-cards")
    def idle_cards(self, request):
        raw = request.query_params.get("threshold")
        try:
            threshold = float(raw) if raw not in (None, "") else None
        except ValueError:
            raise ValidationFailed(
                _("threshold must be a number (percent)."), details={"threshold": ["number"]}
            ) from None
        report = selectors.idle_cards(
            user=request.user,
            period=_period(request),
            threshold_pct=threshold,
            source=request.query_params.get("source") or None,
        )
        return _respond(request, "idle-cards", report, "idle-cards.csv")

    @extend_schema(parameters=PERIOD_PARAMS, responses=REPORT_OBJECT)
    @action(detail=False, methods=["get"])
    def figures(self, request):
        report = selectors.three_figures(
            user=request.user, period=_period(request), source=request.query_params.get("source") or None
        )
        return _respond(request, "figures", report, "utilization-figures.csv")

    @extend_schema(
        parameters=[
            OpenApiParameter("baseline_start", OpenApiTypes.DATETIME, required=True),
            OpenApiParameter("baseline_end", OpenApiTypes.DATETIME, required=True),
            OpenApiParameter("current_start", OpenApiTypes.DATETIME),
            OpenApiParameter("current_end", OpenApiTypes.DATETIME),
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"]),
        ],
        responses=REPORT_OBJECT,
    )
    @action(detail=False, methods=["get"])
    def comparison(self, request):
        selectors.require_staff(request.user)
        q = request.query_params
        if not q.get("baseline_start") or not q.get("baseline_end"):
            raise ValidationFailed(
                "Give baseline_start and baseline_end.",
                details={"baseline_start": ["required"], "baseline_end": ["required"]},
            )
        report = selectors.period_comparison(
            user=request.user,
            baseline=_period(request, "baseline_"),
            current=_period(request, "current_"),
            source=q.get("source") or None,
        )
        return _respond(request, "comparison", report, "period-comparison.csv")

    @extend_schema(
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"])],
        responses=REPORT_OBJECT,
    )
    @action(detail=False, methods=["get"])
    def fragmentation(self, request):
        report = selectors.fragmentation(user=request.user)
        return _respond(request, "fragmentation", report, "fragmentation.csv")


class JobUtilizationViewSet(viewsets.ViewSet):
    """A job's utilization curve (members of its project, and staff)."""

    permission_classes = [IsUser]

    @extend_schema(parameters=[ID_PARAM, *PERIOD_PARAMS], responses=REPORT_OBJECT)
    def retrieve(self, request, pk=None):
        q = request.query_params
        selectors.job_for_user(user=request.user, pk=_pk(pk))  # visibility (404) before the period (400)
        period = _period(request) if q.get("start") or q.get("end") else None
        report = selectors.job_utilization(user=request.user, pk=_pk(pk), period=period)
        return _respond(request, "job", report, f"job-{report['job']}-utilization.csv")


class ProjectUtilizationViewSet(viewsets.ViewSet):
    """A project's utilization (members of the project, and staff)."""

    permission_classes = [IsUser]

    @extend_schema(parameters=[ID_PARAM, *PERIOD_PARAMS], responses=REPORT_OBJECT)
    def retrieve(self, request, pk=None):
        selectors.project_for_user(user=request.user, pk=_pk(pk))  # visibility (404) before the period (400)
        report = selectors.project_utilization(
            user=request.user, pk=_pk(pk), period=_period(request, default_hours=24 * 7)
        )
        return _respond(request, "project", report, f"project-{report['slug']}-utilization.csv")


def _pk(raw) -> int:
    from apps.core.errors import NotFound
    from apps.core.filters import INT64_MAX, INT64_MIN

    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise NotFound("No such object.") from None
    if not INT64_MIN <= value <= INT64_MAX:  # no such row; and SQLite cannot compare it (OverflowError)
        raise NotFound("No such object.")
    return value
