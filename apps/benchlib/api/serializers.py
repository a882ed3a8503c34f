from decimal import Decimal

from rest_framework import serializers

from apps.benchlib.models import CoefficientProposal, Measurement


class MeasurementSerializer(serializers.ModelSerializer):
    profile = serializers.SlugRelatedField(slug_field="key", read_only=True)
    device_model = serializers.CharField(source="device_model.name", read_only=True)
    template = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    node = serializers.CharField(source="node.name", read_only=True, default=None)
    job = serializers.SerializerMethodField()
    source_label = serializers.SerializerMethodField()
    per_card = serializers.SerializerMethodField()
    trusted = serializers.BooleanField(read_only=True)

    class Meta:
        model = Measurement
        fields = [
            "id",
            "profile",
            "device_model",
            "template",
            "compute_share",
            "cards",
            "throughput",
            "per_card",
            "p99_latency_ms",
            "runs",
            "spread_pct",
            "synthetic",
            "source",
            "source_label",
            "trusted",
            "verified_at",
            "verified_by",
            "node",
            "job",
            "driver_version",
            "runtime",
            "measured_at",
            "created_at",
        ]

    def _job_hidden(self, obj) -> bool:
        """The measuring job belongs to a project the reader is not in (staff see every job)."""
        projects = self.context.get("visible_projects", set())
        return obj.job_id is not None and projects is not None and obj.job.project_id not in projects

    def get_job(self, obj) -> int | None:
        return None if obj.job_id is None or self._job_hidden(obj) else obj.job_id

    def get_source_label(self, obj) -> str:
        # The label names the job ("job 12 attempt 1"): another project's reader gets the source only.
        return str(obj.get_source_display()) if self._job_hidden(obj) else obj.source_label

    def get_per_card(self, obj) -> str:
        return str(obj.per_card.quantize(Decimal("0.001")))


class ThroughputReportSerializer(serializers.Serializer):
    """What a job posts at its end (validated by apps.benchlib.services.job_report). No ``runs``: the
    platform counts the reports (one run each); a body that declares it is refused."""

    profile = serializers.CharField(help_text="workload profile key, e.g. resnet50-infer")
    throughput = serializers.CharField(help_text="units of the profile per second (> 0)")
    p99_latency_ms = serializers.CharField(required=False)
    spread_pct = serializers.CharField(required=False)
    measured_at = serializers.DateTimeField(required=False)
    runtime = serializers.CharField(required=False)


class CoefficientProposalSerializer(serializers.ModelSerializer):
    device_model = serializers.CharField(source="device_model.name", read_only=True)
    reference_model = serializers.CharField(source="reference_model.name", read_only=True)

    class Meta:
        model = CoefficientProposal
        fields = [
            "id",
            "device_model",
            "reference_model",
            "current_value",
            "proposed_value",
            "evidence",
            "state",
            "effective_from",
            "decided_by",
            "created_at",
        ]


class ProposalDecisionSerializer(serializers.Serializer):
    effective_from = serializers.DateField(required=False)
