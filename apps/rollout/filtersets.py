"""One FilterSet per model, shared by the API and the pages."""

import django_filters

from apps.core.filters import FilterSet, IsoDateTimeFilter
from apps.rollout.models import (
    AutoscalePolicy,
    BatchKind,
    BenchmarkRun,
    GrayBatch,
    Layer,
    ScaleDecision,
    SoakResult,
    UpgradeWave,
)


class GrayBatchFilterSet(FilterSet):
    stage = django_filters.MultipleChoiceFilter(choices=GrayBatch.Stage.choices)
    kind = django_filters.ChoiceFilter(choices=BatchKind.choices)
    node = django_filters.CharFilter(field_name="nodes__name")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = GrayBatch
        fields = ["stage", "kind", "node", "criteria"]


class SoakResultFilterSet(FilterSet):
    class Meta:
        model = SoakResult
        fields = ["batch", "verdict"]


class BenchmarkRunFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="node__name")

    class Meta:
        model = BenchmarkRun
        fields = ["batch", "node", "name"]


class UpgradeWaveFilterSet(FilterSet):
    layer = django_filters.ChoiceFilter(choices=Layer.choices)

    class Meta:
        model = UpgradeWave
        fields = ["plan", "layer"]


class AutoscalePolicyFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="job__project__slug")

    class Meta:
        model = AutoscalePolicy
        fields = ["job", "enabled", "project"]


class ScaleDecisionFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="job__project__slug")
    since = IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = ScaleDecision
        fields = ["job", "policy", "action", "project", "since"]
