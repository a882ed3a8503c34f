"""One FilterSet per model, shared by the API and the pages."""

import django_filters

from apps.core.filters import IsoDateTimeFilter
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


class GrayBatchFilterSet(django_filters.FilterSet):
    stage = django_filters.MultipleChoiceFilter(choices=GrayBatch.Stage.choices)
    kind = django_filters.ChoiceFilter(choices=BatchKind.choices)
    node = django_filters.CharFilter(field_name="nodes__name")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = GrayBatch
        fields = ["stage", "kind", "node", "criteria"]


class SoakResultFilterSet(django_filters.FilterSet):
    class Meta:
        model = SoakResult
        fields = ["batch", "verdict"]


class BenchmarkRunFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="node__name")

    class Meta:
        model = BenchmarkRun
        fields = ["batch", "node", "name"]


class UpgradeWaveFilterSet(django_filters.FilterSet):
    layer = django_filters.ChoiceFilter(choices=Layer.choices)

    class Meta:
        model = UpgradeWave
        fields = ["plan", "layer"]


class AutoscalePolicyFilterSet(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="job__project__slug")

    class Meta:
        model = AutoscalePolicy
        fields = ["job", "enabled", "project"]


class ScaleDecisionFilterSet(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="job__project__slug")
    since = IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = ScaleDecision
        fields = ["job", "policy", "action", "project", "since"]
