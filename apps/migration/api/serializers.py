from rest_framework import serializers

from apps.catalog.models import Vendor
from apps.core.api.localized import LocalizedTextsMixin
from apps.jobs.models import Job
from apps.migration.models import (
    AccuracyEval,
    Gate,
    MigratedService,
    MigrationAction,
    MigrationPlan,
    PlanPhase,
    ServiceMetric,
)


class PlanPhaseSerializer(serializers.ModelSerializer):
    class Meta:
        model = PlanPhase
        fields = ["id", "plan", "phase", "target_start", "target_end", "owner", "notes"]


class PlanPhaseInlineSerializer(serializers.ModelSerializer):
    class Meta:
        model = PlanPhase
        fields = ["phase", "target_start", "target_end", "owner", "notes"]


class GateSerializer(serializers.ModelSerializer):
    description = serializers.CharField(source="describe", read_only=True)

    class Meta:
        model = Gate
        fields = ["id", "plan", "phase", "kind", "threshold", "window_days", "metric", "description"]
        read_only_fields = ["id", "description"]


class GateInlineSerializer(serializers.ModelSerializer):
    class Meta:
        model = Gate
        fields = ["phase", "kind", "threshold", "window_days", "metric"]


class MigrationPlanSerializer(serializers.ModelSerializer):
    source_vendors = serializers.ListField(child=serializers.ChoiceField(choices=Vendor.choices))
    target_vendors = serializers.ListField(child=serializers.ChoiceField(choices=Vendor.choices))
    phases = PlanPhaseInlineSerializer(many=True, required=False)
    gates = GateInlineSerializer(many=True, required=False)

    class Meta:
        model = MigrationPlan
        fields = [
            "id",
            "name",
            "description",
            "source_vendors",
            "target_vendors",
            "validate_max_target_weight",
            "fallback_cards",
            "phases",
            "gates",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]


class MigratedServiceSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("gate_results",)

    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    source_replicas = serializers.IntegerField(source="source_job.replicas", read_only=True)
    target_replicas = serializers.IntegerField(source="target_job.replicas", read_only=True)
    source_job_state = serializers.CharField(source="source_job.state", read_only=True)
    target_job_state = serializers.CharField(source="target_job.state", read_only=True)
    next_phase = serializers.CharField(read_only=True, allow_null=True)

    class Meta:
        model = MigratedService
        fields = [
            "id",
            "plan",
            "project",
            "name",
            "kind",
            "critical",
            "source_job",
            "target_job",
            "source_vendor",
            "target_vendor",
            "source_job_state",
            "target_job_state",
            "capacity_replicas",
            "source_weight",
            "target_weight",
            "source_replicas",
            "target_replicas",
            "step_percent",
            "phase",
            "next_phase",
            "phase_changed_at",
            "gate_status",
            "gate_checked_at",
            "gate_results",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class MigratedServiceCreateSerializer(serializers.Serializer):
    plan = serializers.PrimaryKeyRelatedField(queryset=MigrationPlan.objects.all())
    name = serializers.CharField(max_length=120)
    kind = serializers.ChoiceField(
        choices=MigratedService.Kind.choices, default=MigratedService.Kind.INFERENCE
    )
    critical = serializers.BooleanField(default=False)
    # Scoped to the requester's jobs by the view (another project's job is "does not exist").
    source_job = serializers.PrimaryKeyRelatedField(queryset=Job.objects.all())
    target_job = serializers.PrimaryKeyRelatedField(queryset=Job.objects.all())
    capacity_replicas = serializers.IntegerField(min_value=1, max_value=64, required=False)
    # Plain integers: the service says precisely what is wrong (range, sum ≠ 100).
    source_weight = serializers.IntegerField(required=False)
    target_weight = serializers.IntegerField(required=False)
    step_percent = serializers.IntegerField(min_value=1, max_value=100, default=10)


class ShiftSerializer(serializers.Serializer):
    step = serializers.IntegerField(
        required=False, help_text="percent of the traffic; default: the service's step"
    )
    source_weight = serializers.IntegerField(required=False)
    target_weight = serializers.IntegerField(required=False)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class RollbackSerializer(serializers.Serializer):
    target_weight = serializers.IntegerField(required=False, default=0)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class PromoteSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class MigrationActionSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("reason", "gate_results")

    class Meta:
        model = MigrationAction
        fields = [
            "id",
            "service",
            "created_at",
            "kind",
            "actor_label",
            "from_phase",
            "to_phase",
            "from_target_weight",
            "to_target_weight",
            "replicas",
            "reason",
            "gate_results",
        ]
        read_only_fields = fields


class ServiceMetricSerializer(serializers.ModelSerializer):
    class Meta:
        model = ServiceMetric
        fields = [
            "id",
            "service",
            "track",
            "window_start",
            "window_seconds",
            "requests",
            "errors",
            "p99_latency_ms",
            "source",
            "ingested_at",
        ]
        read_only_fields = fields


class MetricIngestSerializer(serializers.Serializer):
    service = serializers.PrimaryKeyRelatedField(queryset=MigratedService.objects.all())
    samples = serializers.ListField(child=serializers.DictField(), allow_empty=False)


class IngestResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    updated = serializers.IntegerField()


class AccuracyEvalSerializer(serializers.ModelSerializer):
    class Meta:
        model = AccuracyEval
        fields = [
            "id",
            "service",
            "track",
            "metric",
            "value",
            "dataset",
            "source",
            "measured_at",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]


class VendorShareSerializer(serializers.Serializer):
    vendor = serializers.CharField()
    label = serializers.CharField()
    cu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    share_pct = serializers.DecimalField(max_digits=6, decimal_places=2)
    amount = serializers.DecimalField(max_digits=18, decimal_places=2)
    entries = serializers.IntegerField()


class VendorShareMonthSerializer(serializers.Serializer):
    month = serializers.DateField()
    cu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    amount = serializers.DecimalField(max_digits=18, decimal_places=2)
    vendors = VendorShareSerializer(many=True)


class FootprintSerializer(serializers.Serializer):
    vendor = serializers.CharField()
    label = serializers.CharField()
    cards_in_fleet = serializers.IntegerField(allow_null=True)
    cards_allocated = serializers.IntegerField()
    compute_units = serializers.DecimalField(max_digits=14, decimal_places=4)


class TrackFiguresSerializer(serializers.Serializer):
    track = serializers.CharField()
    job_id = serializers.IntegerField()
    job_name = serializers.CharField()
    job_state = serializers.CharField()
    vendor = serializers.CharField()
    replicas = serializers.IntegerField()
    weight = serializers.IntegerField()
    windows = serializers.IntegerField()
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    throughput_rps = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    p99_ms = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    error_rate_pct = serializers.DecimalField(max_digits=10, decimal_places=4, allow_null=True)
    cu_hours = serializers.DecimalField(max_digits=18, decimal_places=4)
    cost = serializers.DecimalField(max_digits=18, decimal_places=2)
    cost_per_1k = serializers.DecimalField(max_digits=18, decimal_places=4, allow_null=True)
    utilization_pct = serializers.DecimalField(max_digits=6, decimal_places=2, allow_null=True)
    sources = serializers.ListField(child=serializers.CharField())


class ComparisonSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    tracks = TrackFiguresSerializer(many=True)
