from rest_framework import serializers

from apps.inventory.models import Cluster
from apps.telemetry import exposition
from apps.telemetry.models import DeviceRollup, MetricSource


class MetricSourceSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())

    class Meta:
        model = MetricSource
        fields = [
            "id",
            "cluster",
            "name",
            "kind",
            "url",
            "targets",
            "step_seconds",
            "enabled",
            "ingested_until",
            "last_run_at",
            "last_error",
            "last_report",
            "created_at",
        ]
        read_only_fields = ["ingested_until", "last_run_at", "last_error", "last_report", "created_at"]


class DeviceRollupSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="device.node.name", read_only=True)

    class Meta:
        model = DeviceRollup
        fields = [
            "id",
            "device",
            "node",
            "partition",
            "resolution",
            "window_start",
            "source",
            "quality",
            "scrape_interval_s",
            "sample_count",
            "first_sample_at",
            "last_sample_at",
            "util_avg",
            "util_max",
            "mem_used_avg_mib",
            "mem_used_max_mib",
            "mem_total_mib",
            "temp_max_c",
            "power_avg_w",
            "error_deltas",
            "health",
            "pods",
        ]


class ScrapeInputSerializer(serializers.Serializer):
    text = serializers.CharField(trim_whitespace=False, max_length=exposition.MAX_TEXT_CHARS)
    at = serializers.DateTimeField(required=False)
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all(), required=False)
    source = serializers.CharField(max_length=200, required=False, default="api")
    dry_run = serializers.BooleanField(required=False, default=False)
