"""Device models (设备模板) with their compute coefficient (算力系数)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.core.models import BaseModel

# One compute unit (CU) = the reference card (NVIDIA A100 80GB SXM4, dense BF16) for one hour.
REFERENCE_DENSE_TFLOPS = Decimal("312")


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    AMD = "amd", "AMD"
    HUAWEI = "huawei", "Huawei Ascend"
    HYGON = "hygon", "Hygon DCU"
    CAMBRICON = "cambricon", "Cambricon"
    INTEL = "intel", "Intel"


class DeviceKind(models.TextChoices):
    GPU = "gpu", "GPU"
    NPU = "npu", "NPU"
    DCU = "dcu", "DCU"
    MLU = "mlu", "MLU"
    HPU = "hpu", "HPU"


class Confidence(models.TextChoices):
    HIGH = "high", _("high")
    MEDIUM = "medium", _("medium")
    LOW = "low", _("low")


class DeviceModel(BaseModel):
    """One concrete accelerator model. Unknown specs stay null; every row keeps its sources."""

    vendor = models.CharField(max_length=20, choices=Vendor.choices, db_index=True)
    kind = models.CharField(max_length=10, choices=DeviceKind.choices)
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    architecture = models.CharField(max_length=60, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True, help_text=_("device memory in MiB"))
    memory_type = models.CharField(max_length=40, blank=True)
    memory_bandwidth_gbs = models.DecimalField(max_digits=9, decimal_places=1, null=True, blank=True)
    fp16_dense_tflops = models.DecimalField(max_digits=9, decimal_places=2, null=True, blank=True)
    bf16_dense_tflops = models.DecimalField(max_digits=9, decimal_places=2, null=True, blank=True)
    fp32_tflops = models.DecimalField(max_digits=9, decimal_places=2, null=True, blank=True)
    int8_tops = models.DecimalField(max_digits=9, decimal_places=1, null=True, blank=True)
    tdp_w = models.PositiveIntegerField(null=True, blank=True)
    ai_cores = models.PositiveIntegerField(null=True, blank=True)
    interconnect = models.CharField(max_length=120, blank=True)
    interconnect_bandwidth_gbs = models.DecimalField(max_digits=9, decimal_places=1, null=True, blank=True)
    # Capability flags: "mig", "vnpu", "memory_slicing", "nvlink", "hccs", "xgmi", "mlulink", "rdma".
    features = models.JSONField(default=list, blank=True)
    # MIG profile name -> max instances per card (NVIDIA/mig-parted).
    mig_profiles = models.JSONField(default=dict, blank=True)
    # Ascend vNPU template name -> {"aicore": n, "aicpu": n, "mem_gb": n?}.
    vnpu_templates = models.JSONField(default=dict, blank=True)
    k8s_resource_names = models.JSONField(default=list, blank=True)
    # Names the vendor tools print for this model (nvidia-smi product_name, npu-smi chip name, ...).
    product_names = models.JSONField(default=list, blank=True)
    pci_device_ids = models.JSONField(default=list, blank=True)
    confidence = models.CharField(max_length=10, choices=Confidence.choices, default=Confidence.MEDIUM)
    sources = models.JSONField(default=list, blank=True)
    notes = models.TextField(blank=True)
    is_builtin = models.BooleanField(default=False, help_text=_("loaded from the catalog data file"))

    class Meta:
        ordering = ["vendor", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(vendor__in=[v.value for v in Vendor]),
                name="catalog_devicemodel_vendor_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(memory_mib__isnull=True) | models.Q(memory_mib__gt=0),
                name="catalog_devicemodel_memory_positive",
            ),
        ]
        verbose_name = _("device model")

    def __str__(self) -> str:
        return f"{self.get_vendor_display()} {self.name}"

    @property
    def memory_gib(self) -> Decimal | None:
        return None if self.memory_mib is None else (Decimal(self.memory_mib) / 1024).quantize(Decimal("0.1"))

    def default_coefficient(self) -> Decimal | None:
        """Dense FP16/BF16 TFLOPS ÷ 312 (the reference card), or None when the catalog does not know."""
        tflops = max(
            (t for t in (self.bf16_dense_tflops, self.fp16_dense_tflops) if t is not None), default=None
        )
        if tflops is None:
            return None
        return (Decimal(tflops) / REFERENCE_DENSE_TFLOPS).quantize(Decimal("0.0001"))


class ComputeCoefficient(BaseModel):
    """A device model's compute coefficient from a date on. The newest row effective today applies."""

    class Basis(models.TextChoices):
        TFLOPS = "tflops", _("dense FP16/BF16 TFLOPS ÷ 312")
        POLICY = "policy", _("platform decision")
        BENCHMARK = "benchmark", _("measured benchmark")

    device_model = models.ForeignKey(DeviceModel, on_delete=models.PROTECT, related_name="coefficients")
    value = models.DecimalField(max_digits=8, decimal_places=4)
    effective_from = models.DateField()
    basis = models.CharField(max_length=12, choices=Basis.choices, default=Basis.TFLOPS)
    reason = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["device_model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["device_model", "effective_from"], name="catalog_computecoefficient_unique_date"
            ),
            models.CheckConstraint(
                condition=models.Q(value__gt=0), name="catalog_computecoefficient_positive"
            ),
        ]
        verbose_name = _("compute coefficient")

    def __str__(self) -> str:
        return f"{self.device_model.name}: {self.value} from {self.effective_from}"
