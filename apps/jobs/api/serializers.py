from decimal import Decimal

from rest_framework import serializers

from apps.accounts.models import Project
from apps.catalog.models import ComputeTemplate, DeviceModel, DeviceRequestTemplate, WorkloadProfile
from apps.core.api.localized import LocalizedTextsMixin
from apps.jobs import validation
from apps.jobs.models import SUBMIT_FIELDS, Allocation, Job, JobEvent
from apps.scheduling.models import DecisionTrace

_AFTER_PRIORITY_CLASS = SUBMIT_FIELDS.index("priority_class") + 1


class JobSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("state_reason",)

    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    template = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    device_model = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    request_template = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    workload_profile = serializers.SlugRelatedField(slug_field="key", read_only=True, allow_null=True)
    submitted_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "project",
            *SUBMIT_FIELDS[:_AFTER_PRIORITY_CLASS],
            "priority",  # derived from priority_class; listed next to it
            *SUBMIT_FIELDS[_AFTER_PRIORITY_CLASS:],
            "attempt",
            "state",
            "state_reason",
            "state_changed_at",
            "requested_cu",
            "last_trace_id",
            "submitted_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class TolerationSerializer(serializers.Serializer):
    """core/v1 Toleration (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#scheduling);
    the cross-field rules (Exists takes no value, tolerationSeconds only with NoExecute) are checked by
    the service (apps/jobs/validation.py)."""

    key = serializers.CharField(required=False, allow_blank=True, max_length=317)  # prefix 253 + "/" + 63
    operator = serializers.ChoiceField(choices=validation.TOLERATION_OPERATORS, required=False)
    value = serializers.CharField(required=False, allow_blank=True, max_length=63)
    effect = serializers.ChoiceField(choices=validation.TAINT_EFFECTS, required=False, allow_blank=True)
    tolerationSeconds = serializers.IntegerField(  # noqa: N815 - the Kubernetes field name
        required=False, allow_null=True, min_value=-validation.INT64_MAX - 1, max_value=validation.INT64_MAX
    )

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(str(k)[:40] for k in data if k not in self.fields)
            if unknown:
                raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
        values = super().to_internal_value(data)
        return {k: v for k, v in values.items() if v is not None}


class JobSubmitSerializer(serializers.Serializer):
    project = serializers.SlugRelatedField(slug_field="slug", queryset=Project.objects.all())
    name = serializers.CharField(max_length=120)
    kind = serializers.ChoiceField(choices=Job.Kind.choices, default=Job.Kind.TRAINING)
    image = serializers.CharField(max_length=300)
    command = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        max_length=validation.COMMAND_MAX_ITEMS,
    )
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=validation.ENV_VALUE_MAX_LENGTH),
        required=False,
        default=dict,
    )
    runtime_requirement = serializers.CharField(max_length=60, required=False, allow_blank=True, default="")
    request_kind = serializers.ChoiceField(choices=Job.RequestKind.choices)
    template = serializers.SlugRelatedField(
        slug_field="slug", queryset=ComputeTemplate.objects.select_related("device_model"), required=False
    )
    device_model = serializers.SlugRelatedField(
        slug_field="slug", queryset=DeviceModel.objects.all(), required=False
    )
    vendor = serializers.CharField(max_length=20, required=False, allow_blank=True, default="")
    min_memory_mib = serializers.IntegerField(min_value=1, required=False)
    required_features = serializers.ListField(
        child=serializers.CharField(max_length=validation.LIST_ITEM_MAX_LENGTH),
        required=False,
        default=list,
        max_length=validation.LIST_MAX_ITEMS,
    )
    count = serializers.IntegerField(min_value=1, max_value=64, default=1)
    compute_units = serializers.DecimalField(max_digits=8, decimal_places=3, required=False, min_value=0)
    memory_mib = serializers.IntegerField(min_value=0, required=False)
    allowed_vendors = serializers.ListField(
        child=serializers.CharField(max_length=validation.LIST_ITEM_MAX_LENGTH),
        required=False,
        default=list,
        max_length=validation.LIST_MAX_ITEMS,
    )
    request_template = serializers.SlugRelatedField(
        slug_field="slug", queryset=DeviceRequestTemplate.objects.all(), required=False
    )
    workload_profile = serializers.SlugRelatedField(
        slug_field="key", queryset=WorkloadProfile.objects.all(), required=False
    )
    target_throughput = serializers.DecimalField(
        max_digits=14, decimal_places=3, required=False, min_value=Decimal("0.001")
    )
    target_latency_ms = serializers.DecimalField(
        max_digits=10, decimal_places=2, required=False, min_value=Decimal("0.01")
    )
    replicas = serializers.IntegerField(min_value=1, max_value=64, default=1)
    node_selector = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=63), required=False, default=dict
    )
    tolerations = serializers.ListField(
        child=TolerationSerializer(), required=False, default=list, max_length=validation.TOLERATIONS_MAX
    )
    gray_opt_in = serializers.BooleanField(default=False)
    priority_class = serializers.ChoiceField(
        choices=Job._meta.get_field("priority_class").choices, default="normal"
    )
    expected_duration_s = serializers.IntegerField(min_value=1, required=False)
    checkpoint_dir = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    max_retries = serializers.IntegerField(min_value=0, max_value=20, default=0)
    retry_backoff_s = serializers.IntegerField(min_value=0, default=60)


class JobEventSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("message",)

    class Meta:
        model = JobEvent
        fields = ["id", "created_at", "kind", "from_state", "to_state", "message", "actor_label", "data"]


class AllocationSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("release_reason",)

    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    device_index = serializers.IntegerField(source="device.index", read_only=True)
    device_uuid = serializers.CharField(source="device.uuid", read_only=True, allow_null=True)

    class Meta:
        model = Allocation
        fields = [
            "id",
            "node",
            "device",
            "device_index",
            "device_uuid",
            "replica",
            "attempt",
            "whole_card",
            "memory_mib",
            "compute_milli",
            "isolation",
            "partition_profile",
            "trace_id",
            "started_at",
            "released_at",
            "release_reason",
        ]


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class DecisionTraceSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("explanation", "steps")

    class Meta:
        model = DecisionTrace
        fields = [
            "trace_id",
            "created_at",
            "policy",
            "outcome",
            "explanation",
            "queue_position",
            "steps",
            "candidates",
            "placement",
        ]
