from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.benchlib import recommend as rec
from apps.benchlib import selectors, services
from apps.benchlib.api import serializers as s
from apps.core.api.permissions import IsStaffOrReadOnly, IsUser
from apps.quotas.library import quota_ceiling


class RecommendationView(APIView):
    """``GET /api/catalog/recommendations/?profile=P&target=N[&latency_ms=L][&vendor=V…]``: the same answer
    as ``manage.py recommend --json``; ``?profiles=1`` lists the profiles with their measurement counts."""

    permission_classes = [IsUser]

    @extend_schema(
        parameters=[
            OpenApiParameter("profile", OpenApiTypes.STR),
            OpenApiParameter("target", OpenApiTypes.NUMBER),
            OpenApiParameter("latency_ms", OpenApiTypes.NUMBER),
            OpenApiParameter("vendor", OpenApiTypes.STR, many=True),
            OpenApiParameter("profiles", OpenApiTypes.BOOL),
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        if request.query_params.get("profiles") in ("1", "true", "yes"):
            return Response({"profiles": rec.profiles_summary()})
        answer = rec.recommend(
            profile=request.query_params.get("profile", ""),
            target=request.query_params.get("target"),
            latency_ms=request.query_params.get("latency_ms"),
            vendors=request.query_params.getlist("vendor"),
            user=request.user,
            quota_ceiling=quota_ceiling,
        )
        return Response(answer.as_dict())


class MeasurementViewSet(viewsets.ReadOnlyModelViewSet):
    """The library's measurements (fleet data; the measuring job is shown only where it is visible)."""

    serializer_class = s.MeasurementSerializer
    permission_classes = [IsUser]
    ordering_fields = ["measured_at", "throughput"]
    ordering = ["-measured_at", "-id"]
    filterset_fields = ["profile__key", "device_model__slug", "synthetic", "source"]

    def get_queryset(self):
        return selectors.measurement_list()

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["visible_projects"] = selectors.visible_project_ids(self.request.user)
        return context

    @extend_schema(request=None, responses=s.MeasurementSerializer)
    @action(detail=True, methods=["post"])
    def verify(self, request, pk=None):
        """Platform staff vouch for a job report: it then ranks fleet-wide and may back proposals."""
        measurement = services.measurement_verify(measurement=self.get_object(), actor=request.user)
        return Response(s.MeasurementSerializer(measurement, context=self.get_serializer_context()).data)


class CoefficientProposalViewSet(viewsets.ReadOnlyModelViewSet):
    """Coefficients the measurements contradict; platform staff accept (future metering only) or dismiss."""

    serializer_class = s.CoefficientProposalSerializer
    permission_classes = [IsStaffOrReadOnly]
    ordering = ["-created_at"]

    def get_queryset(self):
        return selectors.coefficient_proposal_list()

    @extend_schema(request=s.ProposalDecisionSerializer, responses=s.CoefficientProposalSerializer)
    @action(detail=True, methods=["post"])
    def accept(self, request, pk=None):
        data = s.ProposalDecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        proposal = services.coefficient_proposal_decide(
            proposal=self.get_object(),
            accept=True,
            actor=request.user,
            effective_from=data.validated_data.get("effective_from"),
        )
        return Response(s.CoefficientProposalSerializer(proposal).data)

    @extend_schema(request=None, responses=s.CoefficientProposalSerializer)
    @action(detail=True, methods=["post"])
    def dismiss(self, request, pk=None):
        proposal = services.coefficient_proposal_decide(
            proposal=self.get_object(), accept=False, actor=request.user
        )
        return Response(s.CoefficientProposalSerializer(proposal).data)
