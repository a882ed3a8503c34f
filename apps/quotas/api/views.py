import datetime as dt

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.accounts.selectors import project_list
from apps.core.errors import ValidationFailed
from apps.quotas import selectors, services
from apps.quotas.api import serializers as s
from apps.quotas.filtersets import QuotaFilterSet


class QuotaViewSet(
    mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet
):
    """Quotas: everyone reads the quotas of their projects (and their departments); platform staff write."""

    serializer_class = s.QuotaSerializer
    filterset_class = QuotaFilterSet
    ordering_fields = ["guaranteed_cu", "created_at"]

    def get_queryset(self):
        return selectors.quota_list(user=self.request.user)

    @extend_schema(request=s.QuotaCreateSerializer, responses={201: s.QuotaSerializer})
    def create(self, request, *args, **kwargs):
        data = s.QuotaCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        quota = services.quota_create(actor=request.user, **data.validated_data)
        return Response(s.QuotaSerializer(quota).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.QuotaUpdateSerializer, responses=s.QuotaSerializer)
    def update(self, request, *args, **kwargs):
        quota = self.get_object()
        data = s.QuotaUpdateSerializer(data=request.data, partial=kwargs.get("partial", False))
        data.is_valid(raise_exception=True)
        quota = services.quota_update(quota=quota, actor=request.user, **data.validated_data)
        return Response(s.QuotaSerializer(quota).data)

    def destroy(self, request, *args, **kwargs):
        services.quota_delete(quota=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=s.ShowbackSerializer)
    @action(detail=False, methods=["get"])
    def usage(self, request):
        """Now: guaranteed vs used vs borrowed per project quota, and who borrows from whom."""
        rows, flows = selectors.quota_usage(user=request.user)
        return Response(s.ShowbackSerializer({"quotas": rows, "flows": flows}).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("project", OpenApiTypes.STR, required=True),
            OpenApiParameter("days", OpenApiTypes.INT, description="1–92, default 30"),
        ],
        responses=s.HistorySerializer,
    )
    @action(detail=False, methods=["get"])
    def history(self, request):
        """Over time: guaranteed vs used vs borrowed CU of one project, and the share of its guarantee used."""
        project = get_object_or_404(
            project_list(user=request.user), slug=request.query_params.get("project", "")
        )
        try:
            days = int(request.query_params.get("days", 30))
        except ValueError:
            raise ValidationFailed(
                "days must be a whole number.", details={"days": ["not a number"]}
            ) from None
        if not 1 <= days <= 92:
            raise ValidationFailed("days must be between 1 and 92.", details={"days": ["between 1 and 92"]})
        end = timezone.now()
        start = end - dt.timedelta(days=days)
        step = dt.timedelta(hours=1 if days <= 2 else 6 if days <= 14 else 24)
        body = {
            "project": project.slug,
            "share_of_guarantee_used": selectors.guarantee_share_used(project=project, start=start, end=end),
            "points": selectors.usage_history(project=project, start=start, end=end, step=step),
        }
        return Response(s.HistorySerializer(body).data)
