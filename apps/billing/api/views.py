"""Billing API. Members read their projects' bills and usage; staff run the ledger."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.billing import exports, selectors, services
from apps.billing.api import serializers as s
from apps.billing.filtersets import (
    AdjustmentFilterSet,
    BillFilterSet,
    BillingPeriodFilterSet,
    RateCardFilterSet,
    UsageEntryFilterSet,
)
from apps.core.api.pagination import CappedCountPagination
from apps.core.api.permissions import IsStaff, IsStaffOrReadOnly
from apps.core.permissions import require_staff

FORMAT_PARAMETER = OpenApiParameter("format", OpenApiTypes.STR, enum=["csv", "xlsx", "pdf"])


def _download(content: bytes, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class RateCardViewSet(viewsets.ModelViewSet):
    serializer_class = s.RateCardSerializer
    filterset_class = RateCardFilterSet
    permission_classes = [IsStaffOrReadOnly]
    search_fields = ["name"]

    def get_queryset(self):
        return selectors.rate_card_list()

    def perform_create(self, serializer):
        serializer.instance = services.rate_card_create(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = services.rate_card_update(
            card=serializer.instance, actor=self.request.user, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        services.rate_card_delete(card=instance, actor=self.request.user)

    @extend_schema(request=s.DiscountInputSerializer, responses=s.RateCardSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsStaff])
    def discount(self, request, pk=None):
        card = self.get_object()
        data = s.DiscountInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.rate_card_discount_set(card=card, actor=request.user, **data.validated_data)
        return Response(s.RateCardSerializer(self.get_queryset().get(pk=card.pk)).data)


class UsageEntryViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.UsageEntrySerializer
    filterset_class = UsageEntryFilterSet
    pagination_class = CappedCountPagination  # an append-only ledger of millions of rows
    ordering_fields = ["slice_start", "amount", "cu_hours"]

    def get_queryset(self):
        return selectors.usage_entry_list(user=self.request.user)


class BillViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Bills are computed by month close. PUT/PATCH exist only to answer precisely: 409."""

    filterset_class = BillFilterSet
    ordering_fields = ["month", "total"]
    search_fields = ["project__slug", "project__name"]

    def get_queryset(self):
        qs = selectors.bill_list(user=self.request.user)
        if self.action == "retrieve":
            qs = qs.prefetch_related("lines")
        return qs

    def get_serializer_class(self):
        return s.BillDetailSerializer if self.action == "retrieve" else s.BillSerializer

    def update(self, request, *args, **kwargs):
        bill = self.get_object()
        require_staff(request.user, message="Only platform staff may change bills.")
        services.bill_update(bill=bill, actor=request.user, **dict(request.data))
        return Response(status=status.HTTP_409_CONFLICT)  # pragma: no cover - bill_update always raises

    @extend_schema(
        parameters=[FORMAT_PARAMETER], responses={(200, "application/octet-stream"): OpenApiTypes.BINARY}
    )
    @action(detail=True, methods=["get"])
    def export(self, request, pk=None):
        bill = self.get_object()
        data = s.ExportFormatSerializer(data=request.query_params)
        data.is_valid(raise_exception=True)
        return _download(*exports.bill_export(bill, data.validated_data["format"]))

    @extend_schema(request=None, responses=s.BillSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsStaff])
    def finalize(self, request, pk=None):
        bill = services.bill_finalize(bill=self.get_object(), actor=request.user)
        return Response(s.BillSerializer(self.get_queryset().get(pk=bill.pk)).data)


class AdjustmentViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.AdjustmentSerializer
    filterset_class = AdjustmentFilterSet
    search_fields = ["reason", "project__slug"]

    def get_permissions(self):
        if self.action == "create":
            return [IsStaff()]
        return super().get_permissions()

    def get_queryset(self):
        return selectors.adjustment_list(user=self.request.user)

    def perform_create(self, serializer):
        serializer.instance = services.adjustment_create(actor=self.request.user, **serializer.validated_data)


class BillingPeriodViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.BillingPeriodSerializer
    filterset_class = BillingPeriodFilterSet
    permission_classes = [IsStaff]

    def get_queryset(self):
        return selectors.period_list()

    @extend_schema(request=s.MonthCloseInputSerializer, responses=s.BillingPeriodSerializer)
    @action(detail=False, methods=["post"])
    def close(self, request):
        data = s.MonthCloseInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        period = services.month_close(
            month=services.parse_month(data.validated_data["month"]),
            actor=request.user,
            finalize=data.validated_data["finalize"],
            idle_policy=data.validated_data.get("idle_policy"),
        )
        return Response(s.BillingPeriodSerializer(self.get_queryset().get(pk=period.pk)).data)

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"])
    def export(self, request, pk=None):
        period = self.get_object()
        return _download(exports.month_export_zip(period), "application/zip", f"bills-{period.label}.zip")
