from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from apps.catalog import selectors, services
from apps.catalog.api import serializers as s
from apps.catalog.filtersets import ComputeCoefficientFilterSet, DeviceModelFilterSet
from apps.core.api.permissions import IsStaffOrReadOnly, IsUser


class DeviceModelViewSet(viewsets.ReadOnlyModelViewSet):
    """The device catalog (public spec data: any signed-in user may read it, it is not project-scoped)."""

    serializer_class = s.DeviceModelSerializer
    filterset_class = DeviceModelFilterSet
    permission_classes = [IsUser]
    ordering_fields = ["vendor", "name", "memory_mib", "fp16_dense_tflops", "bf16_dense_tflops"]
    ordering = ["vendor", "name"]
    search_fields = ["name", "slug"]

    def get_queryset(self):
        return selectors.device_model_list()


class ComputeCoefficientViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Coefficient versions. Anyone signed in may read them; platform staff add new versions."""

    serializer_class = s.ComputeCoefficientSerializer
    filterset_class = ComputeCoefficientFilterSet
    permission_classes = [IsStaffOrReadOnly]
    ordering_fields = ["effective_from", "created_at", "value"]
    ordering = ["device_model__name", "-effective_from"]

    def get_queryset(self):
        return selectors.compute_coefficient_list()

    @extend_schema(
        request=s.ComputeCoefficientCreateSerializer, responses={201: s.ComputeCoefficientSerializer}
    )
    def create(self, request, *args, **kwargs):
        data = s.ComputeCoefficientCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        coefficient = services.compute_coefficient_set(actor=request.user, **data.validated_data)
        body = s.ComputeCoefficientSerializer(self.get_queryset().get(pk=coefficient.pk)).data
        return Response(body, status=status.HTTP_201_CREATED)
