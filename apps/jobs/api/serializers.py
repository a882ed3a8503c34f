from rest_framework import serializers

from apps.accounts.models import Project
from apps.catalog.models import ComputeTemplate, DeviceModel, DeviceRequestTemplate
from apps.jobs.models import SUBMIT_FIELDS, Job, JobEvent
from apps.scheduling.models import Allocation, DecisionTrace

_AFTER_PRIORITY_CLASS = SUBMIT_FIELDS.index("priority_class") + 1


class JobSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    template = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    device_model = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    request_template = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
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


class JobSubmitSerializer(serializers.Serializer):
    project = serializers.SlugRelatedField(slug_field="slug", queryset=Project.objects.all())
    name = serializers.CharField(max_length=120)
    kind = serializers.ChoiceField(choices=Job.Kind.choices, default=Job.Kind.TRAINING)
    image = serializers.CharField(max_length=300)
    command = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False, default=dict)
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
    required_features = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    count = serializers.IntegerField(min_value=1, max_value=64, default=1)
    compute_units = serializers.DecimalField(max_digits=8, decimal_places=3, required=False, min_value=0)
    memory_mib = serializers.IntegerField(min_value=0, required=False)
    allowed_vendors = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    request_template = serializers.SlugRelatedField(
        slug_field="slug", queryset=DeviceRequestTemplate.objects.all(), required=False
    )
    replicas = serializers.IntegerField(min_value=1, max_value=64, default=1)
    node_selector = serializers.DictField(child=serializers.CharField(), required=False, default=dict)
    tolerations = serializers.ListField(child=serializers.DictField(), required=False, default=list)
    gray_opt_in = serializers.BooleanField(default=False)
    priority_class = serializers.ChoiceField(
        choices=Job._meta.get_field("priority_class").choices, default="normal"
    )
    expected_duration_s = serializers.IntegerField(min_value=1, required=False)
    checkpoint_dir = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    max_retries = serializers.IntegerField(min_value=0, max_value=20, default=0)
    retry_backoff_s = serializers.IntegerField(min_value=0, default=60)


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["id", "created_at", "kind", "from_state", "to_state", "message", "actor_label", "data"]


class AllocationSerializer(serializers.ModelSerializer):
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


class DecisionTraceSerializer(serializers.ModelSerializer):
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


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
