"""One FilterSet per model, shared by the API and the pages."""

import django_filters

from apps.catalog.models import ComputeCoefficient, Confidence, DeviceKind, DeviceModel, Vendor

FEATURE_CHOICES = [
    (f, f) for f in ("mig", "vnpu", "memory_slicing", "nvlink", "hccs", "xgmi", "mlulink", "rdma")
]


class DeviceModelFilterSet(django_filters.FilterSet):
    vendor = django_filters.MultipleChoiceFilter(choices=Vendor.choices)
    kind = django_filters.MultipleChoiceFilter(choices=DeviceKind.choices)
    confidence = django_filters.MultipleChoiceFilter(choices=Confidence.choices)
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    feature = django_filters.ChoiceFilter(
        choices=FEATURE_CHOICES, method="filter_feature", label="has feature"
    )

    class Meta:
        model = DeviceModel
        fields = ["vendor", "kind", "confidence", "name", "is_builtin"]

    def filter_feature(self, queryset, name, value):
        # Text match on the JSON list ('"mig"'): portable to SQLite, where JSON containment is missing.
        return queryset.filter(features__icontains=f'"{value}"')


class ComputeCoefficientFilterSet(django_filters.FilterSet):
    device_model = django_filters.NumberFilter(field_name="device_model_id")
    device_model_slug = django_filters.CharFilter(field_name="device_model__slug")
    vendor = django_filters.ChoiceFilter(field_name="device_model__vendor", choices=Vendor.choices)
    basis = django_filters.ChoiceFilter(choices=ComputeCoefficient.Basis.choices)
    effective_from_after = django_filters.DateFilter(field_name="effective_from", lookup_expr="gte")
    effective_from_before = django_filters.DateFilter(field_name="effective_from", lookup_expr="lte")

    class Meta:
        model = ComputeCoefficient
        fields = ["device_model", "device_model_slug", "vendor", "basis"]
