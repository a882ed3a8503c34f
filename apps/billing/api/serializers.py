from rest_framework import serializers

from apps.accounts.models import Project
from apps.billing.models import (
    Adjustment,
    Bill,
    BillingPeriod,
    BillLine,
    IdlePolicy,
    RateCard,
    RateCardDiscount,
    UsageEntry,
)
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.core.api.localized import LocalizedTextsMixin
from apps.inventory.models import Pool


class RateCardDiscountSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = RateCardDiscount
        fields = ["project", "percent"]


class RateCardSerializer(serializers.ModelSerializer):
    pool = serializers.PrimaryKeyRelatedField(queryset=Pool.objects.all(), required=False, allow_null=True)
    device_model = serializers.SlugRelatedField(
        slug_field="slug", queryset=DeviceModel.objects.all(), required=False, allow_null=True
    )
    template = serializers.SlugRelatedField(
        slug_field="slug", queryset=ComputeTemplate.objects.all(), required=False, allow_null=True
    )
    discounts = RateCardDiscountSerializer(many=True, read_only=True)

    class Meta:
        model = RateCard
        fields = [
            "id",
            "name",
            "scope",
            "pool",
            "device_model",
            "template",
            "price_per_cu_hour",
            "currency",
            "effective_from",
            "effective_to",
            "notes",
            "discounts",
            "created_at",
        ]
        read_only_fields = ["id", "discounts", "created_at"]
        # Model rules (negative price, scope target, overlap) are checked by the service.
        validators: list = []

    def validate_price_per_cu_hour(self, value):
        if value < 0:
            raise serializers.ValidationError("A price cannot be negative.")
        return value


class DiscountInputSerializer(serializers.Serializer):
    project = serializers.SlugRelatedField(slug_field="slug", queryset=Project.objects.all())
    percent = serializers.DecimalField(max_digits=5, decimal_places=2, min_value=0, max_value=100)


class UsageEntrySerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    job_name = serializers.CharField(source="job.name", read_only=True)
    device_model = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    template = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    month = serializers.DateField(format="%Y-%m")

    class Meta:
        model = UsageEntry
        fields = [
            "id",
            "project",
            "job",
            "job_name",
            "allocation",
            "device_model",
            "template",
            "pool",
            "month",
            "slice_start",
            "slice_end",
            "hours",
            "compute_units",
            "basis",
            "cu_hours",
            "rate_card",
            "unit_price",
            "discount_percent",
            "currency",
            "amount",
            "late",
            "metered_at",
        ]
        read_only_fields = fields


class BillLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = BillLine
        fields = ["group", "position", "label", "device_model", "template", "job", "cu_hours", "amount"]
        read_only_fields = fields


class BillSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    project_name = serializers.CharField(source="project.name", read_only=True)
    month = serializers.DateField(format="%Y-%m", read_only=True)

    class Meta:
        model = Bill
        fields = [
            "id",
            "project",
            "project_name",
            "month",
            "state",
            "currency",
            "used_cu_hours",
            "guaranteed_cu_hours",
            "entry_count",
            "usage_amount",
            "adjustments_amount",
            "idle_share_amount",
            "total",
            "finalized_at",
            "created_at",
        ]
        read_only_fields = fields


class BillDetailSerializer(BillSerializer):
    lines = BillLineSerializer(many=True, read_only=True)

    class Meta(BillSerializer.Meta):
        fields = [*BillSerializer.Meta.fields, "lines"]
        read_only_fields = fields


class AdjustmentSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", queryset=Project.objects.all())
    corrects_bill = serializers.PrimaryKeyRelatedField(
        queryset=Bill.objects.all(), required=False, allow_null=True
    )
    month = serializers.DateField(format="%Y-%m", read_only=True)
    amount = serializers.DecimalField(max_digits=14, decimal_places=2)
    reason = serializers.CharField(max_length=500)

    class Meta:
        model = Adjustment
        fields = [
            "id",
            "project",
            "month",
            "amount",
            "cu_hours",
            "currency",
            "reason",
            "corrects_bill",
            "actor_label",
            "created_at",
        ]
        read_only_fields = ["id", "month", "currency", "actor_label", "created_at"]


class BillingPeriodSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("progress_message",)

    month = serializers.DateField(format="%Y-%m", read_only=True)
    # The progress of the month's close run (BillingPeriod.close_run), as before closes had runs.
    progress_total = serializers.IntegerField(read_only=True)
    progress_done = serializers.IntegerField(read_only=True)
    progress_percent = serializers.IntegerField(read_only=True)
    progress_message = serializers.CharField(read_only=True)
    bill_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = BillingPeriod
        fields = [
            "id",
            "month",
            "state",
            "idle_policy",
            "currency",
            "progress_total",
            "progress_done",
            "progress_percent",
            "progress_message",
            "idle_cu_hours",
            "idle_cost",
            "platform_cost",
            "bill_count",
            "closed_at",
            "closed_by",
        ]
        read_only_fields = fields


class MonthCloseInputSerializer(serializers.Serializer):
    month = serializers.RegexField(r"^\d{4}-\d{2}$", help_text="YYYY-MM")
    finalize = serializers.BooleanField(default=True)
    idle_policy = serializers.ChoiceField(choices=IdlePolicy.choices, required=False)


class ExportFormatSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=["csv", "xlsx", "pdf"], default="csv")
