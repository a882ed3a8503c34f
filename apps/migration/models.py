"""Migration to domestic accelerators (国产化迁移), seed 004 §6 "平滑迁移策略".

The seed's path: validate non-critical inference services on Ascend / DCU in dual track (双轨), migrate
inference, then training (with accuracy checks), then shrink NVIDIA to a CUDA fallback. A
``MigrationPlan`` holds that path (phases with target dates, owners and gates); a ``MigratedService``
is one workload in dual track: the source-vendor Job and the domestic Job, each with its replicas and
traffic weight. Every shift / rollback / promote is a ``MigrationAction`` with its actor.

Comparisons come from measured data, never typed in (DESIGN.md): ``ServiceMetric`` holds per-track
request counts, errors and p99 latency windows ingested from the service's own metrics (e.g. its
Prometheus histogram), ``AccuracyEval`` holds accuracy measurements of training tracks with where
they came from; cost comes from the billing ledger.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Project
from apps.catalog.models import Vendor
from apps.core.formatting import plain_decimal
from apps.core.models import BaseModel
from apps.core.stored_text import stored
from apps.jobs.models import Job


class Phase(models.TextChoices):
    """Seed 004 §6: 阶段1 验证 → 阶段2 推理服务迁移 → 阶段3 训练任务迁移 → 阶段4 NVIDIA 资源缩减."""

    VALIDATE = "validate", _("1 · validate (dual track)")
    INFERENCE = "inference", _("2 · migrate inference")
    TRAINING = "training", _("3 · migrate training")
    REDUCE = "reduce", _("4 · reduce NVIDIA to a fallback")


PHASE_ORDER: tuple[str, ...] = (Phase.VALIDATE, Phase.INFERENCE, Phase.TRAINING, Phase.REDUCE)
# The phases a workload walks through: inference services skip the training phase, training
# workloads the inference phase (seed: "先推理后训练").
PHASES_FOR_KIND: dict[str, tuple[str, ...]] = {
    "inference": (Phase.VALIDATE, Phase.INFERENCE, Phase.REDUCE),
    "training": (Phase.VALIDATE, Phase.TRAINING, Phase.REDUCE),
}


class Track(models.TextChoices):
    SOURCE = "source", _("source (NVIDIA)")
    TARGET = "target", _("target (domestic)")


def _vendor_list_errors(value, field: str) -> dict[str, list[str]]:
    if not isinstance(value, list) or not value:
        return {field: [_("Give at least one vendor.")]}
    unknown = [v for v in value if v not in Vendor.values]
    if unknown:
        return {field: [_("Unknown vendors: %(v)s.") % {"v": ", ".join(map(str, unknown))}]}
    return {}


class MigrationPlan(BaseModel):
    """Source vendor(s) → target vendor(s), with phases, their dates, owners and gates."""

    name = models.CharField(_("name"), max_length=120, unique=True)
    description = models.TextField(_("description"), blank=True)
    source_vendors = models.JSONField(_("source vendors"), default=list)
    target_vendors = models.JSONField(_("target vendors"), default=list)
    validate_max_target_weight = models.PositiveSmallIntegerField(
        _("largest domestic traffic weight while validating (%)"),
        default=20,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text=_("Seed 004 §6 phase 1: non-critical services, run in parallel; promote to go further."),
    )
    fallback_cards = models.PositiveIntegerField(
        _("NVIDIA cards kept as CUDA fallback"),
        default=0,
        help_text=_("Phase 4: NVIDIA keeps a minimum footprint for the CUDA ecosystem."),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(validate_max_target_weight__gte=1) & Q(validate_max_target_weight__lte=100),
                name="migration_migrationplan_validate_weight_range",
            ),
        ]
        verbose_name = _("migration plan")

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = _vendor_list_errors(self.source_vendors, "source_vendors")
        errors.update(_vendor_list_errors(self.target_vendors, "target_vendors"))
        if not errors and set(self.source_vendors) & set(self.target_vendors):
            errors["target_vendors"] = [_("A vendor cannot be both a source and a target.")]
        if errors:
            raise ValidationError(errors)


class PlanPhase(BaseModel):
    """One phase of a plan: when it should start and end, and who owns it."""

    plan = models.ForeignKey(MigrationPlan, on_delete=models.CASCADE, related_name="phases")
    phase = models.CharField(_("phase"), max_length=10, choices=Phase.choices)
    target_start = models.DateField(_("target start"), null=True, blank=True)
    target_end = models.DateField(_("target end"), null=True, blank=True)
    owner = models.CharField(_("owner"), max_length=150, blank=True)
    notes = models.TextField(_("notes"), blank=True)

    class Meta:
        ordering = ["plan_id", "target_start", "id"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "phase"], name="migration_planphase_unique_phase"),
            models.CheckConstraint(
                condition=Q(phase__in=["validate", "inference", "training", "reduce"]),
                name="migration_planphase_phase_valid",
            ),
            models.CheckConstraint(
                condition=Q(target_end__isnull=True)
                | Q(target_start__isnull=True)
                | Q(target_end__gte=F("target_start")),
                name="migration_planphase_dates_ordered",
            ),
        ]
        verbose_name = _("plan phase")

    def __str__(self) -> str:
        return f"{self.plan.name}: {self.get_phase_display()}"

    def clean(self) -> None:
        if self.target_start and self.target_end and self.target_end < self.target_start:
            raise ValidationError({"target_end": _("The end date is before the start date.")})


# A gate in words: stored with each evaluation (``gate_results``) and shown in the reader's language.
P99_GATE = stored("target p99 ≤ source p99 + %(x)s %% for %(z)s days")
ERROR_GATE = stored("target error rate ≤ %(y)s %% for %(z)s days")
ACCURACY_GATE = stored("|Δ %(metric)s| ≤ %(t)s")


class Gate(BaseModel):
    """A condition a service must meet before it leaves ``phase``.

    * ``p99_latency``: the target track's p99 latency is at most ``threshold`` % above the source
      track's, on each of the last ``window_days`` days;
    * ``error_rate``: the target track's error rate is at most ``threshold`` % on each of those days;
    * ``accuracy``: the latest target-track evaluation of ``metric`` differs from the source track's
      by at most ``threshold`` (in the metric's unit, e.g. percentage points).
    """

    class Kind(models.TextChoices):
        # xgettext:no-python-format
        P99_LATENCY = "p99_latency", _("p99 latency within X % of the source")
        ERROR_RATE = "error_rate", _("error rate at most Y %")
        ACCURACY = "accuracy", _("accuracy delta within tolerance")

    plan = models.ForeignKey(MigrationPlan, on_delete=models.CASCADE, related_name="gates")
    phase = models.CharField(_("phase"), max_length=10, choices=Phase.choices)
    kind = models.CharField(_("kind"), max_length=12, choices=Kind.choices)
    threshold = models.DecimalField(
        _("threshold"), max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal("0"))]
    )
    window_days = models.PositiveSmallIntegerField(
        _("days"), default=7, validators=[MinValueValidator(1), MaxValueValidator(90)]
    )
    metric = models.CharField(_("accuracy metric"), max_length=60, blank=True)

    class Meta:
        ordering = ["plan_id", "phase", "kind", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["p99_latency", "error_rate", "accuracy"]),
                name="migration_gate_kind_valid",
            ),
            models.CheckConstraint(
                condition=Q(phase__in=["validate", "inference", "training", "reduce"]),
                name="migration_gate_phase_valid",
            ),
            models.CheckConstraint(
                condition=Q(threshold__gte=0), name="migration_gate_threshold_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(window_days__gte=1) & Q(window_days__lte=90), name="migration_gate_days_range"
            ),
            models.CheckConstraint(
                condition=~Q(kind="accuracy") | ~Q(metric=""), name="migration_gate_accuracy_has_metric"
            ),
        ]
        verbose_name = _("gate")

    def __str__(self) -> str:
        return f"{self.plan.name} / {self.phase}: {self.describe()}"

    def describe(self) -> str:
        if self.kind == self.Kind.P99_LATENCY:
            return gettext(P99_GATE) % {
                "x": plain_decimal(self.threshold),
                "z": self.window_days,
            }
        if self.kind == self.Kind.ERROR_RATE:
            return gettext(ERROR_GATE) % {
                "y": plain_decimal(self.threshold),
                "z": self.window_days,
            }
        return gettext(ACCURACY_GATE) % {"metric": self.metric, "t": plain_decimal(self.threshold)}

    def clean(self) -> None:
        if self.kind == self.Kind.ACCURACY and not self.metric:
            raise ValidationError({"metric": _("Name the accuracy metric the gate compares.")})
        if self.kind == self.Kind.ERROR_RATE and self.threshold is not None and self.threshold > 100:
            raise ValidationError({"threshold": _("An error rate is a percentage (0–100).")})


class GateStatus(models.TextChoices):
    PENDING = "pending", _("not evaluated")
    PASSED = "passed", _("passed")
    FAILED = "failed", _("failed")


class MigratedService(BaseModel):
    """One workload in dual track: the source-vendor Job and the domestic Job."""

    class Kind(models.TextChoices):
        INFERENCE = "inference", _("inference service")
        TRAINING = "training", _("training workload")

    plan = models.ForeignKey(MigrationPlan, on_delete=models.PROTECT, related_name="services")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="migrated_services")
    name = models.CharField(_("name"), max_length=120)
    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices, default=Kind.INFERENCE)
    critical = models.BooleanField(
        _("business-critical"), default=False, help_text=_("Seed 004 §6: start with non-critical services.")
    )
    source_job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="migration_source_of")
    target_job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="migration_target_of")
    workload_profile = models.ForeignKey(
        "catalog.WorkloadProfile",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="migrated_services",
        help_text=_("The kind of work: the cockpit compares its measured throughput on both tracks."),
    )
    source_vendor = models.CharField(_("source vendor"), max_length=20, choices=Vendor.choices)
    target_vendor = models.CharField(_("target vendor"), max_length=20, choices=Vendor.choices)
    capacity_replicas = models.PositiveSmallIntegerField(
        _("capacity (replicas)"),
        default=2,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text=_("Replicas the service needs in all; split over the tracks by their weights."),
    )
    source_weight = models.PositiveSmallIntegerField(
        _("source traffic weight (%)"), default=100, validators=[MaxValueValidator(100)]
    )
    target_weight = models.PositiveSmallIntegerField(
        _("target traffic weight (%)"), default=0, validators=[MaxValueValidator(100)]
    )
    step_percent = models.PositiveSmallIntegerField(
        _("shift step (%)"), default=10, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    phase = models.CharField(_("phase"), max_length=10, choices=Phase.choices, default=Phase.VALIDATE)
    phase_changed_at = models.DateTimeField(null=True, blank=True)
    gate_status = models.CharField(max_length=8, choices=GateStatus.choices, default=GateStatus.PENDING)
    gate_checked_at = models.DateTimeField(null=True, blank=True)
    gate_results = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["plan_id", "name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "name"], name="migration_migratedservice_unique_name"),
            models.CheckConstraint(
                condition=Q(source_weight__gte=0)
                & Q(target_weight__gte=0)
                & Q(source_weight__lte=100)
                & Q(target_weight__lte=100),
                name="migration_migratedservice_weights_range",
            ),
            models.CheckConstraint(
                condition=Q(source_weight=100 - F("target_weight")),
                name="migration_migratedservice_weights_sum_100",
            ),
            models.CheckConstraint(
                condition=~Q(source_job=F("target_job")), name="migration_migratedservice_two_jobs"
            ),
            models.CheckConstraint(
                condition=~Q(source_vendor=F("target_vendor")),
                name="migration_migratedservice_vendors_differ",
            ),
            models.CheckConstraint(
                condition=Q(phase__in=["validate", "inference", "training", "reduce"]),
                name="migration_migratedservice_phase_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["inference", "training"]), name="migration_migratedservice_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(gate_status__in=["pending", "passed", "failed"]),
                name="migration_migratedservice_gate_status_valid",
            ),
        ]
        verbose_name = _("migrated service")

    def __str__(self) -> str:
        return f"{self.plan.name} / {self.name}"

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if (self.source_weight or 0) + (self.target_weight or 0) != 100:
            errors["target_weight"] = [
                _("The traffic weights must add up to 100 (source %(s)s + target %(t)s).")
                % {"s": self.source_weight, "t": self.target_weight}
            ]
        if self.source_vendor and self.source_vendor == self.target_vendor:
            errors["target_job"] = [
                _("Both tracks run on %(vendor)s: the target track must run on another vendor.")
                % {"vendor": self.target_vendor}
            ]
        if self.source_job_id and self.source_job_id == self.target_job_id:
            errors["target_job"] = [_("The two tracks must be two different jobs.")]
        if errors:
            raise ValidationError(errors)

    def job_of(self, track: str) -> Job:
        return self.source_job if track == Track.SOURCE else self.target_job

    @property
    def phases(self) -> tuple[str, ...]:
        return PHASES_FOR_KIND[self.kind]

    @property
    def next_phase(self) -> str | None:
        phases = self.phases
        index = phases.index(self.phase) if self.phase in phases else -1
        return phases[index + 1] if 0 <= index < len(phases) - 1 else None


class MigrationAction(models.Model):
    """One shift / rollback / promote (or a gate evaluation) of a service, with its actor."""

    class Kind(models.TextChoices):
        CREATE = "create", _("dual track started")
        SHIFT = "shift", _("shift a step")
        ROLLBACK = "rollback", _("roll back")
        PROMOTE = "promote", _("promote")

    service = models.ForeignKey(MigratedService, on_delete=models.CASCADE, related_name="actions")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=150, blank=True)
    from_phase = models.CharField(max_length=10, blank=True)
    to_phase = models.CharField(max_length=10, blank=True)
    from_target_weight = models.PositiveSmallIntegerField(null=True, blank=True)
    to_target_weight = models.PositiveSmallIntegerField(null=True, blank=True)
    # {"source": [before, after], "target": [before, after]}
    replicas = models.JSONField(default=dict, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    gate_results = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["create", "shift", "rollback", "promote"]),
                name="migration_migrationaction_kind_valid",
            ),
        ]
        verbose_name = _("migration action")

    def __str__(self) -> str:
        return f"{self.service_id} {self.kind} by {self.actor_label}"


class ServiceMetric(models.Model):
    """One window of a track's request metrics, as the service itself exports them.

    ``requests`` / ``errors`` are counter increases inside the window; ``p99_latency_ms`` the window's
    99th percentile (e.g. ``histogram_quantile(0.99, rate(<histogram>_bucket[5m]))``). ``source``
    says where the numbers came from (Prometheus URL + query, exporter, pushgateway …). Ingestion is
    idempotent: the same window from the same source replaces itself.
    """

    service = models.ForeignKey(MigratedService, on_delete=models.CASCADE, related_name="metrics")
    track = models.CharField(max_length=6, choices=Track.choices)
    window_start = models.DateTimeField()
    window_seconds = models.PositiveIntegerField(default=300)
    requests = models.PositiveBigIntegerField()
    errors = models.PositiveBigIntegerField(default=0)
    p99_latency_ms = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    source = models.CharField(max_length=300)
    ingested_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-window_start", "service_id", "track"]
        constraints = [
            models.UniqueConstraint(
                fields=["service", "track", "window_start", "source"], name="migration_servicemetric_unique"
            ),
            models.CheckConstraint(
                condition=Q(track__in=["source", "target"]), name="migration_servicemetric_track_valid"
            ),
            models.CheckConstraint(
                condition=Q(errors__lte=F("requests")), name="migration_servicemetric_errors_le_requests"
            ),
            models.CheckConstraint(
                condition=Q(window_seconds__gte=1) & Q(window_seconds__lte=86400),
                name="migration_servicemetric_window_range",
            ),
            models.CheckConstraint(
                condition=Q(p99_latency_ms__isnull=True) | Q(p99_latency_ms__gte=0),
                name="migration_servicemetric_p99_not_negative",
            ),
        ]
        indexes = [
            models.Index(fields=["service", "track", "window_start"], name="migration_metric_window_idx")
        ]
        verbose_name = _("service metric")

    def __str__(self) -> str:
        return f"{self.service_id}/{self.track} @ {self.window_start:%Y-%m-%d %H:%M}"


class AccuracyEval(models.Model):
    """One accuracy measurement of a track (seed 004 §6 phase 3: 对训练任务做精度对比验证)."""

    service = models.ForeignKey(MigratedService, on_delete=models.CASCADE, related_name="accuracy_evals")
    track = models.CharField(max_length=6, choices=Track.choices)
    metric = models.CharField(max_length=60)
    value = models.DecimalField(max_digits=14, decimal_places=6)
    dataset = models.CharField(max_length=200, blank=True)
    # Where the figure came from: the evaluation job, its log or report URL.
    source = models.CharField(max_length=300)
    measured_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-measured_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(track__in=["source", "target"]), name="migration_accuracyeval_track_valid"
            ),
        ]
        verbose_name = _("accuracy evaluation")

    def __str__(self) -> str:
        return f"{self.service_id}/{self.track} {self.metric}={self.value}"
