from rest_framework import serializers

from apps.catalog.models import Vendor
from apps.core.api.localized import LocalizedTextsMixin
from apps.inventory.models import Cluster, Device, DeviceEvent, DeviceLink, Node, NodeReport, Pool
from apps.inventory.vendors import AUTO


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "slug", "backend", "device_plugin_modes", "description", "created_at"]


class PoolSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner_project = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = Pool
        fields = ["id", "cluster", "name", "slug", "description", "owner_project", "overcommit_factor"]


class NodeSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("status_reason",)

    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    device_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "cluster",
            "pool",
            "status",
            "status_reason",
            "pending_approval",
            "cpu_arch",
            "cpu_model",
            "cpu_cores",
            "memory_mib",
            "os_image",
            "kernel_version",
            "container_runtime",
            "driver_version",
            "cuda_version",
            "cann_version",
            "rocm_version",
            "dtk_version",
            "labels",
            "taints",
            "rdma_nics",
            "zone",
            "rack",
            "switch",
            "last_report_at",
            "device_count",
        ]


class DeviceSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("health_reason", "cordon_reason")

    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    node_id = serializers.IntegerField(read_only=True)
    cluster = serializers.CharField(source="node.cluster.slug", read_only=True)
    device_model = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    model_name = serializers.CharField(source="model_label", read_only=True)
    owner_project = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = Device
        fields = [
            "id",
            "node",
            "node_id",
            "cluster",
            "vendor",
            "index",
            "device_model",
            "model_name",
            "raw_model_name",
            "model_unrecognized",
            "uuid",
            "serial",
            "pci_bus_id",
            "numa_node",
            "memory_mib",
            "firmware_version",
            "health",
            "health_reason",
            "pool_status",
            "cordoned",
            "cordon_reason",
            "owner_project",
            "topology_group",
            "mig_enabled",
            "partitions",
            "last_seen_at",
        ]


class DeviceLinkSerializer(serializers.ModelSerializer):
    a = serializers.IntegerField(source="device_a.index", read_only=True)
    b = serializers.IntegerField(source="device_b.index", read_only=True)

    class Meta:
        model = DeviceLink
        fields = ["a", "b", "kind", "link", "nvlink_count"]


class DeviceEventSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("message",)

    node = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = DeviceEvent
        fields = [
            "id",
            "created_at",
            "node",
            "device",
            "kind",
            "severity",
            "message",
            "before",
            "after",
            "actor_label",
        ]


class NodeReportSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = NodeReport
        fields = [
            "id",
            "received_at",
            "last_received_at",
            "repeat_count",
            "node",
            "kind",
            "sha256",
            "size_bytes",
            "actor_label",
            "summary",
        ]


class NodeReportInputSerializer(serializers.Serializer):
    node = serializers.CharField(max_length=253)
    cluster = serializers.SlugField(
        required=False, help_text="required to register a node the ledger does not know"
    )
    kind = serializers.ChoiceField(
        choices=[*NodeReport.Kind.choices, (AUTO, "auto (recognised by content)")],
        help_text="the tool that printed the text; 'auto' recognises it and the response's kind says which",
    )
    text = serializers.CharField(trim_whitespace=False, help_text="the raw output of the tool")
    dry_run = serializers.BooleanField(default=False)


class StatusChangeInputSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=Node.Status.choices)
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class PoolStatusInputSerializer(serializers.Serializer):
    pool_status = serializers.ChoiceField(choices=Device.PoolStatus.choices)
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class ReasonInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300)


class CordonInputSerializer(serializers.Serializer):
    cordoned = serializers.BooleanField()
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class LedgerImportInputSerializer(serializers.Serializer):
    file = serializers.FileField()
    dry_run = serializers.BooleanField(default=False)


class VendorField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=Vendor.choices, **kwargs)


class PrecheckInputSerializer(serializers.Serializer):
    requirement = serializers.CharField(
        max_length=60, help_text='e.g. "cuda 12.4", "cann 8.0.RC3", "rocm 6.2"'
    )
    vendor = VendorField(required=False)
    allow_minor_version_compat = serializers.BooleanField(default=False)
