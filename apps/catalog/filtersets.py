"""One FilterSet per model, shared by the API and the pages.

A page filters with its model's FilterSet through ``apps.core.filters.page_filter``. Where the page's
query parameters differ in kind from the API's (one vendor in a select, not a list; a model picked
by id), a ``...PageFilterSet`` subclass redefines those few filters under the page's names and the
rest stays the API's. The API never uses the page subclasses, so its contract does not change.
"""

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import (
    ComputeCoefficient,
    ComputeTemplate,
    Confidence,
    DeviceKind,
    DeviceModel,
    DeviceRequestTemplate,
    Isolation,
    RequestApiVersion,
    Vendor,
)
from apps.core.filters import FilterSet, Int64ModelChoiceField, name_search_filter

FEATURE_CHOICES = [
    (f, f) for f in ("mig", "vnpu", "memory_slicing", "nvlink", "hccs", "xgmi", "mlulink", "rdma")
]


class DeviceModelFilterSet(FilterSet):
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


class DeviceModelPageFilterSet(DeviceModelFilterSet):
    """The device-model page: a name search and single selects (``?vendor=nvidia&kind=gpu``)."""

    search = name_search_filter(_("Model name"))
    vendor = django_filters.ChoiceFilter(choices=Vendor.choices, label=_("Vendor"), empty_label=_("All"))
    kind = django_filters.ChoiceFilter(choices=DeviceKind.choices, label=_("Type"), empty_label=_("All"))
    feature = django_filters.ChoiceFilter(
        choices=FEATURE_CHOICES, method="filter_feature", label=_("Feature"), empty_label=_("All")
    )


class ComputeCoefficientFilterSet(FilterSet):
    device_model = django_filters.NumberFilter(field_name="device_model_id")
    device_model_slug = django_filters.CharFilter(field_name="device_model__slug")
    vendor = django_filters.ChoiceFilter(field_name="device_model__vendor", choices=Vendor.choices)
    basis = django_filters.ChoiceFilter(choices=ComputeCoefficient.Basis.choices)
    effective_from_after = django_filters.DateFilter(field_name="effective_from", lookup_expr="gte")
    effective_from_before = django_filters.DateFilter(field_name="effective_from", lookup_expr="lte")

    class Meta:
        model = ComputeCoefficient
        fields = ["device_model", "device_model_slug", "vendor", "basis"]


# Partition kinds as the profile names spell them (the model's catalog data says the same).
PARTITION_CHOICES = [
    ("mig", "MIG"),
    ("vnpu", "vNPU"),
    ("amd-partition", "AMD partition"),
    ("none", "soft slice"),
]
_PARTITION_PATTERNS = {
    "mig": r"^[0-9]+g\.[0-9]+gb",
    "vnpu": r"^vir",
    "amd-partition": r"^[a-z]+px_nps[0-9]+$",
}


def filter_by_partition(queryset, value: str):
    """ "mig" / "vnpu" / "amd-partition": templates with such a profile; "none": soft slices."""
    if value == "none":
        return queryset.filter(partition_profile="")
    return queryset.filter(partition_profile__regex=_PARTITION_PATTERNS[value])


class ComputeTemplateFilterSet(FilterSet):
    vendor = django_filters.MultipleChoiceFilter(field_name="device_model__vendor", choices=Vendor.choices)
    kind = django_filters.MultipleChoiceFilter(field_name="device_model__kind", choices=DeviceKind.choices)
    device_model = django_filters.NumberFilter(field_name="device_model_id")
    device_model_slug = django_filters.CharFilter(field_name="device_model__slug")
    isolation = django_filters.ChoiceFilter(choices=Isolation.choices)
    partition = django_filters.ChoiceFilter(choices=PARTITION_CHOICES, method="filter_partition")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = ComputeTemplate
        fields = [
            "vendor",
            "kind",
            "device_model",
            "isolation",
            "partition_profile",
            "is_builtin",
            "is_retired",
        ]

    def filter_partition(self, queryset, name, value):
        return filter_by_partition(queryset, value)


class DeviceRequestTemplateFilterSet(FilterSet):
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    api_version = django_filters.ChoiceFilter(choices=RequestApiVersion.choices)

    class Meta:
        model = DeviceRequestTemplate
        fields = ["name", "api_version"]


class _DeviceModelField(Int64ModelChoiceField):
    def label_from_instance(self, obj: DeviceModel) -> str:
        return f"{obj.get_vendor_display()} · {obj.name}"


class _DeviceModelChoiceFilter(django_filters.ModelChoiceFilter):
    field_class = _DeviceModelField


class _IncludeRetiredFilter(django_filters.BooleanFilter):
    """A checkbox read by ``ComputeTemplatePageFilterSet.qs``; filtering nothing by itself."""

    def filter(self, qs, value):
        return qs


class ComputeTemplatePageFilterSet(ComputeTemplateFilterSet):
    """The compute-template page: single selects, the device model picked by id, and retired
    templates hidden unless ``retired`` is ticked (also when nothing is submitted)."""

    vendor = django_filters.ChoiceFilter(
        field_name="device_model__vendor", choices=Vendor.choices, label=_("Vendor"), empty_label=_("All")
    )
    device_model = _DeviceModelChoiceFilter(
        queryset=DeviceModel.objects.order_by("vendor", "name"), label=_("Device model"), empty_label=_("All")
    )
    isolation = django_filters.ChoiceFilter(
        choices=Isolation.choices, label=_("Isolation"), empty_label=_("All")
    )
    partition = django_filters.ChoiceFilter(
        choices=[
            (value, _("soft slice") if value == "none" else label) for value, label in PARTITION_CHOICES
        ],
        method="filter_partition",
        label=_("Partition"),
        empty_label=_("All"),
    )
    retired = _IncludeRetiredFilter(label=_("Include retired"), widget=forms.CheckboxInput)

    @property
    def qs(self):
        queryset = super().qs  # validates a bound form first
        if self.is_bound and self.form.cleaned_data.get("retired"):
            return queryset
        return queryset.filter(is_retired=False)
