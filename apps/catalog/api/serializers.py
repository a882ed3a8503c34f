from rest_framework import serializers

from apps.catalog import selectors
from apps.catalog.models import (
    ComputeCoefficient,
    ComputeTemplate,
    DeviceModel,
    DeviceRequestTemplate,
    Isolation,
)
from apps.core.api.localized import LocalizedTextsMixin


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
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

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


# ------------------------------------------------------------------ compute templates


class ComputeTemplateSerializer(serializers.ModelSerializer):
    device_model_name = serializers.CharField(source="device_model.name", read_only=True)
    device_model_slug = serializers.CharField(source="device_model.slug", read_only=True)
    vendor = serializers.CharField(source="device_model.vendor", read_only=True)
    memory_gib = serializers.IntegerField(read_only=True)
    partition_type = serializers.CharField(
        read_only=True, help_text='"mig", "vnpu", "amd-partition" or "" for a soft slice'
    )
    coefficient = serializers.DecimalField(
        source="current_coefficient",
        max_digits=8,
        decimal_places=4,
        read_only=True,
        allow_null=True,
        help_text="the device model's compute coefficient in force today (null: none set)",
    )
    compute_units = serializers.SerializerMethodField(
        help_text="compute units of one instance: coefficient × share (null when the coefficient is unknown)"
    )
    definition = serializers.SerializerMethodField(
        help_text="the template as exported by .../describe/ (apiVersion suanchi.io/v1, kind ComputeTemplate)"
    )

    class Meta:
        model = ComputeTemplate
        fields = [
            "id",
            "name",
            "slug",
            "device_model",
            "device_model_name",
            "device_model_slug",
            "vendor",
            "memory_mib",
            "memory_gib",
            "compute_share",
            "isolation",
            "partition_profile",
            "partition_type",
            "max_instances",
            "is_builtin",
            "is_retired",
            "description",
            "coefficient",
            "compute_units",
            "definition",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_compute_units(self, obj) -> str | None:
        value = obj.compute_units(getattr(obj, "current_coefficient", None))
        return None if value is None else f"{value:f}"

    def get_definition(self, obj) -> dict:
        return selectors.template_describe(obj, coefficient=getattr(obj, "current_coefficient", None))


class ComputeTemplateWriteSerializer(serializers.Serializer):
    """Input for create / update / preview. Memory in whole GiB (``memory_gib``) or in MiB
    (``memory_mib``); with a partition profile, memory, share and instances may be left out and
    come from the profile. The rules are the model's (ComputeTemplate.clean)."""

    device_model = serializers.PrimaryKeyRelatedField(queryset=DeviceModel.objects.all())
    name = serializers.CharField(max_length=100)
    slug = serializers.SlugField(max_length=120, required=False, allow_blank=True)
    memory_gib = serializers.IntegerField(required=False, allow_null=True, max_value=1 << 21)
    memory_mib = serializers.IntegerField(required=False, allow_null=True, max_value=1 << 31)
    compute_share = serializers.DecimalField(
        max_digits=5, decimal_places=2, required=False, allow_null=True, help_text="percent, 1–100"
    )
    isolation = serializers.ChoiceField(choices=Isolation.choices, required=False)
    partition_profile = serializers.CharField(max_length=40, required=False, allow_blank=True)
    max_instances = serializers.IntegerField(required=False, allow_null=True, max_value=32767)
    description = serializers.CharField(required=False, allow_blank=True)

    def validate(self, attrs):
        gib = attrs.pop("memory_gib", None)
        if gib is not None:
            mib = attrs.get("memory_mib")
            if mib is not None and mib != gib * 1024:
                raise serializers.ValidationError(
                    {"memory_gib": [f"disagrees with memory_mib ({mib} MiB); send one of them"]}
                )
            attrs["memory_mib"] = gib * 1024
        return attrs


class RetireSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class ComputeTemplatePreviewSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    definition = serializers.DictField(allow_null=True)
    yaml = serializers.CharField(allow_blank=True)


# ------------------------------------------------------------------ request templates


class DeviceRequestTemplateSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("warnings",)

    class Meta:
        model = DeviceRequestTemplate
        fields = [
            "id",
            "name",
            "slug",
            "api_version",
            "metadata",
            "spec",
            "resolution",
            "warnings",
            "description",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class RequestTemplateImportSerializer(serializers.Serializer):
    """JSON body for import: {"yaml": "<document>"}. A text/yaml body carries the document itself."""

    yaml = serializers.CharField(trim_whitespace=False)


class RequestTemplateImportResultSerializer(LocalizedTextsMixin, serializers.Serializer):
    localized_fields = ("warnings",)

    outcome = serializers.ChoiceField(choices=["created", "updated", "unchanged"])
    warnings = serializers.ListField(child=serializers.CharField())
    template = DeviceRequestTemplateSerializer()
