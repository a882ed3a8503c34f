from rest_framework import serializers

from apps.catalog.models import WorkloadProfile
from apps.core.api.localized import LocalizedTextsMixin
from apps.inventory.models import Node
from apps.jobs.models import Job
from apps.rollout.models import (
    AutoscalePolicy,
    BatchKind,
    BenchmarkRun,
    GrayBatch,
    ScaleDecision,
    SoakCriteria,
    SoakResult,
    UpgradePlan,
    UpgradeWave,
)

_PCT = {"max_digits": 5, "decimal_places": 2}


class SoakCriteriaSerializer(serializers.ModelSerializer):
    class Meta:
        model = SoakCriteria
        fields = [
            "id",
            "name",
            "min_days",
            "max_error_events",
            "max_temperature_c",
            "max_throughput_drop_pct",
            "max_lost_devices",
            "min_telemetry_coverage_pct",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]


class SoakResultSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("violations", "missing")

    class Meta:
        model = SoakResult
        fields = [
            "id",
            "batch",
            "computed_at",
            "verdict",
            "window_start",
            "window_end",
            "soak_hours",
            "error_events",
            "lost_devices",
            "max_temperature_c",
            "telemetry_coverage_pct",
            "throughput_baseline",
            "throughput_measured",
            "throughput_drop_pct",
            "violations",
            "missing",
            "evidence",
        ]
        read_only_fields = fields


class GrayBatchSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("stage_reason",)

    nodes = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    criteria = serializers.SlugRelatedField(slug_field="name", read_only=True)
    layer = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = GrayBatch
        fields = [
            "id",
            "name",
            "slug",
            "kind",
            "layer",
            "target_version",
            "description",
            "criteria",
            "nodes",
            "baseline_run",
            "stage",
            "stage_reason",
            "soak_started_at",
            "soak_ended_at",
            "decided_at",
            "excluded_devices",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class GrayBatchUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    slug = serializers.SlugField(max_length=60, required=False)
    kind = serializers.ChoiceField(choices=BatchKind.choices, required=False)
    target_version = serializers.CharField(max_length=100, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    criteria = serializers.PrimaryKeyRelatedField(queryset=SoakCriteria.objects.all(), required=False)
    baseline_run = serializers.PrimaryKeyRelatedField(
        queryset=BenchmarkRun.objects.all(), required=False, allow_null=True
    )
    nodes = serializers.PrimaryKeyRelatedField(queryset=Node.objects.all(), many=True, required=False)


class GrayBatchCreateSerializer(GrayBatchUpdateSerializer):
    name = serializers.CharField(max_length=100)
    slug = serializers.SlugField(max_length=60)
    kind = serializers.ChoiceField(choices=BatchKind.choices)
    target_version = serializers.CharField(max_length=100)
    criteria = serializers.PrimaryKeyRelatedField(queryset=SoakCriteria.objects.all())
    nodes = serializers.PrimaryKeyRelatedField(queryset=Node.objects.all(), many=True)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class KeptNodeSerializer(serializers.Serializer):
    node = serializers.CharField()
    reason = serializers.CharField(help_text="why the node stays quarantined (stored text)")


class QuarantineOutcomeSerializer(serializers.Serializer):
    released = serializers.ListField(child=serializers.CharField(), help_text="nodes released")
    kept = KeptNodeSerializer(many=True, help_text="nodes that stay quarantined, and why")


class RollbackResultSerializer(GrayBatchSerializer):
    """The rolled-back batch and what became of the nodes its failure quarantined."""

    quarantine = QuarantineOutcomeSerializer(read_only=True)

    class Meta(GrayBatchSerializer.Meta):
        fields = [*GrayBatchSerializer.Meta.fields, "quarantine"]
        read_only_fields = fields


class NodeReleaseSerializer(serializers.Serializer):
    node = serializers.PrimaryKeyRelatedField(queryset=Node.objects.all())
    reason = serializers.CharField(max_length=300)


class BenchmarkRunSerializer(serializers.ModelSerializer):
    node_name = serializers.CharField(source="node.name", read_only=True)

    class Meta:
        model = BenchmarkRun
        fields = [
            "id",
            "name",
            "node",
            "node_name",
            "batch",
            "job",
            "throughput",
            "unit",
            "measured_at",
            "source",
            "profile",
            "measurement",
            "created_at",
        ]
        read_only_fields = ["id", "node_name", "measurement", "created_at"]
        extra_kwargs = {"measured_at": {"required": False}}

    profile = serializers.SlugRelatedField(
        slug_field="key", queryset=WorkloadProfile.objects.all(), required=False, allow_null=True
    )


class UpgradePlanSerializer(serializers.ModelSerializer):
    class Meta:
        model = UpgradePlan
        fields = ["id", "name", "description", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]


class UpgradeWaveSerializer(serializers.ModelSerializer):
    state = serializers.CharField(read_only=True)
    batch_name = serializers.CharField(source="batch.name", read_only=True)
    batch_stage = serializers.CharField(source="batch.stage", read_only=True)

    class Meta:
        model = UpgradeWave
        fields = ["id", "plan", "batch", "batch_name", "batch_stage", "layer", "state", "created_at"]
        read_only_fields = ["id", "layer", "state", "batch_name", "batch_stage", "created_at"]


class AutoscalePolicySerializer(serializers.ModelSerializer):
    job_name = serializers.CharField(source="job.name", read_only=True)
    project = serializers.CharField(source="job.project.slug", read_only=True)
    replicas = serializers.IntegerField(source="job.replicas", read_only=True)

    class Meta:
        model = AutoscalePolicy
        fields = [
            "id",
            "job",
            "job_name",
            "project",
            "replicas",
            "enabled",
            "up_threshold_pct",
            "up_window_s",
            "down_threshold_pct",
            "down_window_s",
            "cooldown_s",
            "buffer_pct",
            "min_replicas",
            "max_replicas",
            "step",
            "last_scaled_at",
            "last_evaluated_at",
            "last_reason",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class AutoscalePolicyUpdateSerializer(serializers.Serializer):
    """Plain bounds only: the service answers cross-field problems (down ≥ up, min > max) precisely."""

    enabled = serializers.BooleanField(required=False)
    up_threshold_pct = serializers.DecimalField(**_PCT, required=False)
    up_window_s = serializers.IntegerField(min_value=0, required=False)
    down_threshold_pct = serializers.DecimalField(**_PCT, required=False)
    down_window_s = serializers.IntegerField(min_value=0, required=False)
    cooldown_s = serializers.IntegerField(min_value=0, required=False)
    buffer_pct = serializers.DecimalField(**_PCT, required=False)
    min_replicas = serializers.IntegerField(min_value=0, required=False)
    max_replicas = serializers.IntegerField(min_value=0, required=False)
    step = serializers.IntegerField(min_value=0, required=False)


class AutoscalePolicyCreateSerializer(AutoscalePolicyUpdateSerializer):
    job = serializers.PrimaryKeyRelatedField(queryset=Job.objects.select_related("project"))


class ScaleDecisionSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("reason", "error")

    class Meta:
        model = ScaleDecision
        fields = [
            "id",
            "policy",
            "job",
            "created_at",
            "action",
            "from_replicas",
            "to_replicas",
            "reached_replicas",
            "reason",
            "up_window_pct",
            "down_window_pct",
            "projected_pct",
            "error",
            "actor_label",
        ]
        read_only_fields = fields
