from rest_framework import serializers

from apps.accounts.models import Department, Project
from apps.catalog.models import DeviceModel, Vendor
from apps.inventory.models import Pool
from apps.quotas.models import DEFAULT_TIME_ZONE, Quota, ResourceClass


class QuotaSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    device_model = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    class_label = serializers.CharField(read_only=True)
    class_key = serializers.CharField(read_only=True)

    class Meta:
        model = Quota
        fields = [
            "id",
            "department",
            "project",
            "resource_class",
            "vendor",
            "device_model",
            "pool",
            "class_key",
            "class_label",
            "guaranteed_cu",
            "borrowing_limit_cu",
            "lending_limit_cu",
            "memory_limit_mib",
            "lending_windows",
            "time_zone",
            "over_quota_weight",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


_AMOUNT = {"max_digits": 10, "decimal_places": 4}


class QuotaUpdateSerializer(serializers.Serializer):
    """Amounts may be negative here: the service answers with the precise field error."""

    guaranteed_cu = serializers.DecimalField(**_AMOUNT, required=False)
    borrowing_limit_cu = serializers.DecimalField(**_AMOUNT, required=False, allow_null=True)
    lending_limit_cu = serializers.DecimalField(**_AMOUNT, required=False, allow_null=True)
    memory_limit_mib = serializers.IntegerField(required=False, allow_null=True)
    lending_windows = serializers.JSONField(required=False)
    time_zone = serializers.CharField(required=False, max_length=64)
    over_quota_weight = serializers.DecimalField(max_digits=6, decimal_places=2, required=False)


class QuotaCreateSerializer(QuotaUpdateSerializer):
    department = serializers.SlugRelatedField(
        slug_field="slug", queryset=Department.objects.all(), required=False, allow_null=True
    )
    project = serializers.SlugRelatedField(
        slug_field="slug", queryset=Project.objects.all(), required=False, allow_null=True
    )
    resource_class = serializers.ChoiceField(choices=ResourceClass.choices, default=ResourceClass.ANY)
    vendor = serializers.ChoiceField(choices=Vendor.choices, required=False, allow_blank=True)
    device_model = serializers.SlugRelatedField(
        slug_field="slug", queryset=DeviceModel.objects.all(), required=False, allow_null=True
    )
    pool = serializers.PrimaryKeyRelatedField(queryset=Pool.objects.all(), required=False, allow_null=True)
    guaranteed_cu = serializers.DecimalField(**_AMOUNT)
    time_zone = serializers.CharField(required=False, max_length=64, default=DEFAULT_TIME_ZONE)


class QuotaUsageSerializer(serializers.Serializer):
    quota = QuotaSerializer()
    guaranteed_used = serializers.DecimalField(max_digits=12, decimal_places=4)
    borrowed = serializers.DecimalField(max_digits=12, decimal_places=4)
    used = serializers.DecimalField(max_digits=12, decimal_places=4)
    lendable = serializers.DecimalField(max_digits=12, decimal_places=4)
    lending_open = serializers.BooleanField()
    share_of_guarantee = serializers.DecimalField(max_digits=8, decimal_places=1, allow_null=True)


class FlowSerializer(serializers.Serializer):
    borrower = serializers.CharField()
    lender = serializers.CharField()
    amount = serializers.DecimalField(max_digits=12, decimal_places=4)


class ShowbackSerializer(serializers.Serializer):
    quotas = QuotaUsageSerializer(many=True)
    flows = FlowSerializer(many=True)


class HistoryPointSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    guaranteed = serializers.DecimalField(max_digits=12, decimal_places=4)
    used = serializers.DecimalField(max_digits=12, decimal_places=4)
    borrowed = serializers.DecimalField(max_digits=12, decimal_places=4)


class HistorySerializer(serializers.Serializer):
    project = serializers.CharField()
    share_of_guarantee_used = serializers.DecimalField(max_digits=8, decimal_places=1, allow_null=True)
    points = HistoryPointSerializer(many=True)
