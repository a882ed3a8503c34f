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
    METAX = "metax", "MetaX"
    ILUVATAR = "iluvatar", "Iluvatar CoreX"
    KUNLUNXIN = "kunlunxin", "Kunlunxin"
    ENFLAME = "enflame", "Enflame"
    MTHREADS = "mthreads", "Moore Threads"


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


class Isolation(models.TextChoices):
    HARD = "hard", _("hard isolation")
    SHARED = "shared", _("shared")


class ComputeTemplate(BaseModel):
    """A slice of one card model (算力模板): memory, compute share and isolation.

    A template never exceeds its card: memory ≤ physical and max instances × memory ≤ physical (the
    card's memory must be known), compute share 1–100 %, memory in whole GiB. A partition profile
    (MIG ``3g.40gb``, vNPU ``vir05_1c_16g``) must exist for the model and fixes memory, share and the
    instance bound; a blank profile is a soft slice. See apps/catalog/partitions.py for the numbers.
    Cross-table rules live in clean(); the database constraints back up the row-local ones.
    """

    device_model = models.ForeignKey(
        DeviceModel,
        on_delete=models.PROTECT,
        related_name="compute_templates",
        verbose_name=_("device model"),
    )
    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(_("slug"), max_length=120, unique=True)
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"), help_text=_("whole GiB, in MiB"))
    compute_share = models.DecimalField(
        _("compute share (%)"),
        max_digits=5,
        decimal_places=2,
        help_text=_("share of the card's compute, 1–100 %"),
    )
    isolation = models.CharField(
        _("isolation"), max_length=10, choices=Isolation.choices, default=Isolation.HARD
    )
    partition_profile = models.CharField(
        _("partition profile"),
        max_length=40,
        blank=True,
        help_text=_("MIG profile (3g.40gb) or Ascend vNPU template (vir05_1c_16g); blank for a soft slice"),
    )
    max_instances = models.PositiveSmallIntegerField(_("max instances per card"), default=1)
    is_builtin = models.BooleanField(_("built-in"), default=False, help_text=_("generated from the catalog"))
    is_retired = models.BooleanField(_("retired"), default=False)
    description = models.TextField(_("description"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["device_model__vendor", "device_model__name", "-memory_mib", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["device_model", "name"], name="catalog_computetemplate_unique_name"
            ),
            models.CheckConstraint(
                condition=models.Q(isolation__in=[v.value for v in Isolation]),
                name="catalog_computetemplate_isolation_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(memory_mib__gte=1024), name="catalog_computetemplate_memory_positive"
            ),
            models.CheckConstraint(
                condition=models.lookups.Exact(models.functions.Mod("memory_mib", 1024), 0),
                name="catalog_computetemplate_memory_whole_gib",
            ),
            models.CheckConstraint(
                condition=models.Q(compute_share__gte=1, compute_share__lte=100),
                name="catalog_computetemplate_share_range",
            ),
            models.CheckConstraint(
                condition=models.Q(max_instances__gte=1), name="catalog_computetemplate_instances_positive"
            ),
            # A hardware partition (MIG instance, vNPU) is hard-isolated by construction.
            models.CheckConstraint(
                condition=models.Q(partition_profile="") | models.Q(isolation="hard"),
                name="catalog_computetemplate_profile_hard",
            ),
        ]
        verbose_name = _("compute template")
        verbose_name_plural = _("compute templates")

    def __str__(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        """The name in the reader's language: a built-in's stored name ("A100 · whole card") is a
        registered text (apps.catalog.services, apps.core.stored_text); a custom name is kept."""
        from apps.core.stored_text import localize

        return localize(self.name)

    @property
    def memory_gib(self) -> int | None:
        return None if self.memory_mib is None else self.memory_mib // 1024

    @property
    def partition_type(self) -> str:
        """ "mig", "vnpu", "amd-partition" or "" (soft slice); from the model's catalog data (no query
        once loaded)."""
        from apps.catalog.partitions import profile_kind

        if not self.partition_profile or self.device_model_id is None:
            return ""
        return profile_kind(self.device_model, self.partition_profile) or ""

    def compute_units(self, coefficient: Decimal | None) -> Decimal | None:
        """Compute units of one instance: the model's coefficient × share (None when unknown)."""
        from apps.catalog.partitions import compute_units

        return compute_units(coefficient, self.compute_share)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from apps.catalog.partitions import ProfileError, partition_profile

        errors: dict[str, str] = {}
        memory = self.memory_mib
        share = self.compute_share
        if memory is not None and (memory < 1024 or memory % 1024):
            errors["memory_mib"] = _("Memory is set in whole GiB (a multiple of 1024 MiB), at least 1 GiB.")
        if share is not None and not (1 <= share <= 100):
            errors["compute_share"] = _(
                "The compute share is a percentage from 1 to 100 (got %(share)s)."
            ) % {"share": share}
        if self.max_instances is not None and self.max_instances < 1:
            errors["max_instances"] = _("At least one instance per card.")
        if self.device_model_id is None:
            if errors:
                raise ValidationError(errors)
            return
        card = self.device_model
        physical = card.memory_mib
        # The profile's own rules first: they say what the numbers must be.
        if self.partition_profile:
            try:
                profile = partition_profile(card, self.partition_profile)
            except ProfileError as exc:
                errors["partition_profile"] = str(exc)
            else:
                if profile.memory_mib is not None and memory is not None and memory != profile.memory_mib:
                    errors.setdefault(
                        "memory_mib",
                        _("Profile %(profile)s fixes the memory at %(fixed)s GiB (got %(memory)s GiB).")
                        % {
                            "profile": profile.name,
                            "fixed": profile.memory_mib // 1024,
                            "memory": _gib(memory),
                        },
                    )
                if share is not None and share != profile.compute_share:
                    errors.setdefault(
                        "compute_share",
                        _("Profile %(profile)s fixes the compute share at %(fixed)s %% (got %(share)s %%).")
                        % {"profile": profile.name, "fixed": profile.compute_share, "share": share},
                    )
                if self.max_instances and self.max_instances > profile.max_instances:
                    errors.setdefault(
                        "max_instances",
                        _("Profile %(profile)s allows at most %(count)s instances per card.")
                        % {"profile": profile.name, "count": profile.max_instances},
                    )
                if self.isolation != Isolation.HARD:
                    errors["isolation"] = _("A hardware partition profile is always hard-isolated.")
        if memory is not None and "memory_mib" not in errors:
            if physical is None:
                errors["memory_mib"] = _(
                    "The catalog does not know the memory of %(model)s, so a template for it cannot "
                    "be checked against the card."
                ) % {"model": card.name}
            elif memory > physical:
                errors["memory_mib"] = _(
                    "The template is larger than its card: %(memory)s GiB > %(physical)s GiB of %(model)s."
                ) % {"memory": memory // 1024, "physical": _gib(physical), "model": card.name}
            elif self.max_instances and self.max_instances * memory > physical:
                errors.setdefault(
                    "max_instances",
                    _(
                        "%(count)s instances × %(memory)s GiB = %(total)s GiB exceed the %(physical)s GiB "
                        "of %(model)s."
                    )
                    % {
                        "count": self.max_instances,
                        "memory": memory // 1024,
                        "total": self.max_instances * memory // 1024,
                        "physical": _gib(physical),
                        "model": card.name,
                    },
                )
        if errors:
            raise ValidationError(errors)


def _gib(mib: int) -> str:
    """MiB as GiB for messages: whole numbers without decimals (81920 -> "80", 15360 -> "15")."""
    value = Decimal(mib) / 1024
    return f"{value.quantize(Decimal('0.1')):f}".removesuffix(".0")


class RequestApiVersion(models.TextChoices):
    SUANCHI = "suanchi.io/v1", "suanchi.io/v1"
    EXAMPLE = "scheduling.example.io/v1", "scheduling.example.io/v1"


class DeviceRequestTemplate(BaseModel):
    """A reusable device request (seed 000 §3.2): groups of cards by type and model with a topology policy.

    ``spec`` keeps the imported spec normalised ({"devices": [...], "topologyPolicy": {...}}), with
    the model names exactly as written. ``resolution`` says, per device group, which catalog model
    (or family of candidate models) the name was read as; ``warnings`` lists what could not be
    resolved. Both are recomputed on every import.
    """

    name = models.CharField(_("name"), max_length=253, unique=True, help_text=_("metadata.name"))
    slug = models.SlugField(_("slug"), max_length=253, unique=True)
    api_version = models.CharField(
        _("API version"), max_length=60, choices=RequestApiVersion.choices, default=RequestApiVersion.SUANCHI
    )
    metadata = models.JSONField(_("metadata"), default=dict, blank=True, help_text=_("labels, annotations"))
    spec = models.JSONField(_("spec"))
    resolution = models.JSONField(_("model resolution"), default=list, blank=True)
    warnings = models.JSONField(_("warnings"), default=list, blank=True)
    description = models.TextField(_("description"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(api_version__in=[v.value for v in RequestApiVersion]),
                name="catalog_devicerequesttemplate_api_version_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(spec__has_key="devices"),
                name="catalog_devicerequesttemplate_spec_has_devices",
            ),
        ]
        verbose_name = _("request template")
        verbose_name_plural = _("request templates")

    def __str__(self) -> str:
        return self.name

    @property
    def devices(self) -> list[dict]:
        return list((self.spec or {}).get("devices") or [])

    @property
    def topology_policy(self) -> dict:
        return dict((self.spec or {}).get("topologyPolicy") or {})

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from apps.catalog.request_spec import SpecError, spec_validate

        if self.spec is None:
            return  # clean_fields reports the missing spec
        try:
            spec_validate(self.spec)
        except SpecError as exc:
            raise ValidationError({"spec": [f"{path}: {msg}" for path, msg in exc.errors]})


class WorkloadProfile(BaseModel):
    """A named kind of work with a unit of useful output (工作负载画像), e.g. ``llm-serve-7b`` in tokens/s.

    Profiles are data: seeded from ``apps/catalog/data/workload-profiles.yaml`` (each figure with its
    basis) and editable in the admin. The benchmark library (``apps.benchlib``) keeps the measurements
    of each profile on each device model and template; recommendations rank by cost per unit of work.
    """

    key = models.SlugField(_("key"), max_length=60, unique=True)
    name = models.CharField(_("name"), max_length=120)
    unit = models.CharField(_("unit of output"), max_length=40, help_text=_("e.g. tokens/s, images/s"))
    framework = models.CharField(_("framework"), max_length=80, blank=True)
    precision = models.CharField(_("precision"), max_length=20, blank=True)
    memory_mib = models.PositiveIntegerField(
        _("memory per instance (MiB)"),
        null=True,
        blank=True,
        help_text=_("device memory one instance needs; blank when the work is sharded over cards"),
    )
    total_memory_mib = models.PositiveIntegerField(
        _("memory in all (MiB)"),
        null=True,
        blank=True,
        help_text=_("model state to spread over the cards of one instance (sharded training)"),
    )
    latency_bound = models.BooleanField(
        _("measured at a latency bound"), default=False, help_text=_("serving profiles report p99 latency")
    )
    description = models.TextField(_("description"), blank=True)
    basis = models.TextField(_("basis of the figures"), blank=True)
    # How the simulated backend derives synthetic-but-plausible results ({"bound": "compute", ...}).
    synthetic = models.JSONField(default=dict, blank=True)
    is_builtin = models.BooleanField(default=False, help_text=_("loaded from the profile data file"))

    class Meta:
        ordering = ["key"]
        verbose_name = _("workload profile")

    def __str__(self) -> str:
        return f"{self.key} ({self.unit})"
