"""One FilterSet per model, shared by the API and the pages."""

import django_filters
from django.db.models import Q

from apps.catalog.models import Vendor
from apps.core.filters import FilterSet, IsoDateTimeFilter
from apps.inventory.models import Device, DeviceEvent, Node, NodeReport, Pool


class PoolFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__slug")

    class Meta:
        model = Pool
        fields = ["cluster"]


class NodeFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__slug")
    pool = django_filters.CharFilter(field_name="pool__slug")
    status = django_filters.MultipleChoiceFilter(choices=Node.Status.choices)
    vendor = django_filters.ChoiceFilter(choices=Vendor.choices, method="filter_vendor")
    q = django_filters.CharFilter(method="filter_q", label="search")

    class Meta:
        model = Node
        fields = ["cluster", "pool", "status", "cpu_arch", "driver_version", "cann_version", "rack", "switch"]

    def filter_vendor(self, queryset, name, value):
        return queryset.filter(devices__vendor=value).distinct()

    def filter_q(self, queryset, name, value):
        return queryset.filter(
            Q(name__icontains=value) | Q(devices__uuid__iexact=value) | Q(devices__serial__iexact=value)
        ).distinct()


class DeviceFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="node__cluster__slug")
    pool = django_filters.CharFilter(field_name="node__pool__slug")
    node = django_filters.CharFilter(method="filter_node", help_text="node name or id")
    node_id = django_filters.NumberFilter(field_name="node_id")
    vendor = django_filters.MultipleChoiceFilter(choices=Vendor.choices)
    model = django_filters.CharFilter(field_name="device_model__slug")
    device_model = django_filters.NumberFilter(field_name="device_model_id")
    unrecognized = django_filters.BooleanFilter(field_name="model_unrecognized", method="filter_unrecognized")
    health = django_filters.MultipleChoiceFilter(choices=Device.Health.choices)
    pool_status = django_filters.MultipleChoiceFilter(choices=Device.PoolStatus.choices)
    owner_project = django_filters.CharFilter(field_name="owner_project__slug")
    uuid = django_filters.CharFilter(field_name="uuid", lookup_expr="iexact")
    serial = django_filters.CharFilter(field_name="serial", lookup_expr="iexact")
    q = django_filters.CharFilter(method="filter_q", label="search")

    class Meta:
        model = Device
        fields = ["cluster", "pool", "node", "vendor", "model", "health", "pool_status", "model_unrecognized"]

    def filter_node(self, queryset, name, value):
        if value.isdigit():
            return queryset.filter(Q(node_id=int(value)) | Q(node__name=value))
        return queryset.filter(node__name=value)

    def filter_unrecognized(self, queryset, name, value):
        return queryset.filter(model_unrecognized=True) if value else queryset

    def filter_q(self, queryset, name, value):
        return queryset.filter(
            Q(uuid__icontains=value)
            | Q(serial__icontains=value)
            | Q(node__name__icontains=value)
            | Q(pci_bus_id__icontains=value)
        )


class DeviceEventFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="node__name")
    device = django_filters.NumberFilter(field_name="device_id")
    kind = django_filters.MultipleChoiceFilter(choices=DeviceEvent.Kind.choices)
    severity = django_filters.MultipleChoiceFilter(choices=DeviceEvent.Severity.choices)
    since = IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = DeviceEvent
        fields = ["node", "device", "kind", "severity"]


class NodeReportFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="node__name")
    kind = django_filters.ChoiceFilter(choices=NodeReport.Kind.choices)

    class Meta:
        model = NodeReport
        fields = ["node", "kind"]
