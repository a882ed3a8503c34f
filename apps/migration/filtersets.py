"""One FilterSet per model, shared by the API and the pages."""

from __future__ import annotations

import django_filters

from apps.core.filters import FilterSet, IsoDateTimeFilter
from apps.migration.models import (
    AccuracyEval,
    Gate,
    MigratedService,
    MigrationAction,
    PlanPhase,
    ServiceMetric,
)


class MigratedServiceFilterSet(FilterSet):
    plan = django_filters.NumberFilter(field_name="plan_id")
    project = django_filters.CharFilter(field_name="project__slug")
    phase = django_filters.CharFilter(field_name="phase")
    gate_status = django_filters.CharFilter(field_name="gate_status")
    target_vendor = django_filters.CharFilter(field_name="target_vendor")

    class Meta:
        model = MigratedService
        fields = ["plan", "project", "phase", "gate_status", "kind", "critical", "target_vendor"]


class MigrationActionFilterSet(FilterSet):
    service = django_filters.NumberFilter(field_name="service_id")
    plan = django_filters.NumberFilter(field_name="service__plan_id")

    class Meta:
        model = MigrationAction
        fields = ["service", "plan", "kind"]


class GateFilterSet(FilterSet):
    plan = django_filters.NumberFilter(field_name="plan_id")

    class Meta:
        model = Gate
        fields = ["plan", "phase", "kind"]


class PlanPhaseFilterSet(FilterSet):
    plan = django_filters.NumberFilter(field_name="plan_id")

    class Meta:
        model = PlanPhase
        fields = ["plan", "phase"]


class ServiceMetricFilterSet(FilterSet):
    service = django_filters.NumberFilter(field_name="service_id")
    since = IsoDateTimeFilter(field_name="window_start", lookup_expr="gte")
    until = IsoDateTimeFilter(field_name="window_start", lookup_expr="lt")

    class Meta:
        model = ServiceMetric
        fields = ["service", "track"]


class AccuracyEvalFilterSet(FilterSet):
    service = django_filters.NumberFilter(field_name="service_id")

    class Meta:
        model = AccuracyEval
        fields = ["service", "track", "metric"]
