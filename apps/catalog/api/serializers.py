from rest_framework import serializers

from apps.catalog.models import ComputeCoefficient, DeviceModel


class DeviceModelSerializer(serializers.ModelSerializer):
    memory_gib = serializers.DecimalField(max_digits=9, decimal_places=1, read_only=True)
    coefficient = serializers.DecimalField(
        source="current_coefficient",
        max_digits=8,
        decimal_places=4,
        read_only=True,
        allow_null=True,
        help_text="compute coefficient in force today (null: none set)",
    )
    default_coefficient = serializers.SerializerMethodField(
        help_text="dense FP16/BF16 TFLOPS ÷ 312, or null when the catalog does not know"
    )

    class Meta:
        model = DeviceModel
        fields = [
            "id",
            "vendor",
            "kind",
            "name",
            "slug",
            "architecture",
            "memory_mib",
            "memory_gib",
            "memory_type",
            "memory_bandwidth_gbs",
            "fp16_dense_tflops",
            "bf16_dense_tflops",
            "fp32_tflops",
            "int8_tops",
            "tdp_w",
            "ai_cores",
            "interconnect",
            "interconnect_bandwidth_gbs",
            "features",
            "mig_profiles",
            "vnpu_templates",
            "k8s_resource_names",
            "product_names",
            "pci_device_ids",
            "confidence",
            "sources",
            "notes",
            "is_builtin",
            "coefficient",
            "default_coefficient",
        ]
        read_only_fields = fields

    def get_default_coefficient(self, obj) -> str | None:
        value = obj.default_coefficient()
        return None if value is None else str(value)


class ComputeCoefficientSerializer(serializers.ModelSerializer):
    device_model_name = serializers.CharField(source="device_model.name", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ComputeCoefficient
        fields = [
            "id",
            "device_model",
            "device_model_name",
            "value",
            "effective_from",
            "basis",
            "reason",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class ComputeCoefficientCreateSerializer(serializers.Serializer):
    """Input for a new coefficient version; the rules (value > 0, reason for policy, one row per
    date) are the service's."""

    device_model = serializers.PrimaryKeyRelatedField(queryset=DeviceModel.objects.all())
    value = serializers.DecimalField(max_digits=8, decimal_places=4)
    effective_from = serializers.DateField()
    basis = serializers.ChoiceField(choices=ComputeCoefficient.Basis.choices)
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
