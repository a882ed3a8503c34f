import django_filters

from apps.core.filters import FilterSet, IsoDateTimeFilter
from apps.telemetry.models import DeviceRollup, MetricSource


class DeviceRollupFilterSet(FilterSet):
    start = IsoDateTimeFilter(field_name="window_start", lookup_expr="gte")
    end = IsoDateTimeFilter(field_name="window_start", lookup_expr="lt")
    node = django_filters.CharFilter(field_name="device__node__name")

    class Meta:
        model = DeviceRollup
        fields = ["device", "partition", "resolution", "source", "quality", "start", "end", "node"]


class MetricSourceFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__slug")

    class Meta:
        model = MetricSource
        fields = ["cluster", "kind", "enabled"]
