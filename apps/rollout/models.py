"""Rollout: gray-release batches with soak criteria and computed results, layered upgrade waves,
benchmark runs, and autoscaling policies for inference services with their decision history.

Seed 000 §5: prove new cards and new drivers on a few test nodes for days (error rate, temperature,
performance decay) before they join production; upgrade layer by layer (device plugin and collector,
then the scheduler, then node drivers). Seed 001 §5.2: scale inference on sustained utilization with
windows and a buffer, not on every blip.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from apps.core.models import BaseModel
from apps.inventory.models import Node

PCT = [MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("100"))]


class BatchKind(models.TextChoices):
    HARDWARE = "hardware", _("new hardware batch")
    DRIVER = "driver", _("driver")
    FIRMWARE = "firmware", _("firmware")
    DEVICE_PLUGIN = "device_plugin", _("device plugin")
    COLLECTOR = "collector", _("collector")
    SCHEDULER = "scheduler", _("scheduler")


class Layer(models.IntegerChoices):
    """Upgrade order (seed 000 §5): a later layer never starts before the earlier ones passed."""

    AGENTS = 1, _("collector / device plugin")
    SCHEDULER = 2, _("scheduler")
    NODE_DRIVERS = 3, _("node drivers / firmware")


# Which layer a batch kind upgrades; new hardware is not an upgrade layer.
LAYER_OF_KIND: dict[str, int] = {
    BatchKind.COLLECTOR: Layer.AGENTS,
    BatchKind.DEVICE_PLUGIN: Layer.AGENTS,
    BatchKind.SCHEDULER: Layer.SCHEDULER,
    BatchKind.DRIVER: Layer.NODE_DRIVERS,
    BatchKind.FIRMWARE: Layer.NODE_DRIVERS,
}


class SoakCriteria(BaseModel):
    """What a batch must show during its soak. The defaults are platform policy, not vendor specs."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    min_days = models.PositiveSmallIntegerField(
        _("minimum soak (days)"), default=3, validators=[MinValueValidator(1), MaxValueValidator(90)]
    )
    max_error_events = models.PositiveIntegerField(
        _("maximum error events"),
        default=0,
        help_text=_(
            "critical device events on the batch's nodes (XID, fault codes, uncorrectable errors, lost)"
        ),
    )
    max_temperature_c = models.DecimalField(
        _("maximum temperature (°C)"),
        max_digits=5,
        decimal_places=1,
        default=Decimal("85.0"),
        validators=[MinValueValidator(Decimal("1"))],
    )
    max_throughput_drop_pct = models.DecimalField(
        _("maximum throughput drop vs baseline (%)"),
        max_digits=5,
        decimal_places=2,
        null=True,
        blank=True,
        validators=PCT,
        help_text=_("empty: no benchmark required"),
    )
    max_lost_devices = models.PositiveIntegerField(_("maximum lost devices"), default=0)
    min_telemetry_coverage_pct = models.DecimalField(
        _("minimum telemetry coverage (%)"),
        max_digits=5,
        decimal_places=2,
        default=Decimal("90"),
        validators=PCT,
        help_text=_("share of the soak's hours with utilization data for each card"),
    )

    class Meta:
        ordering = ["name"]
        verbose_name = _("soak criteria")
        verbose_name_plural = _("soak criteria")
        constraints = [
            models.CheckConstraint(
                condition=Q(min_days__gte=1), name="rollout_soakcriteria_min_days_positive"
            ),
            models.CheckConstraint(
                condition=Q(max_temperature_c__gt=0), name="rollout_soakcriteria_temperature_positive"
            ),
            models.CheckConstraint(
                condition=Q(max_throughput_drop_pct__isnull=True)
                | (Q(max_throughput_drop_pct__gte=0) & Q(max_throughput_drop_pct__lte=100)),
                name="rollout_soakcriteria_drop_range",
            ),
            models.CheckConstraint(
                condition=Q(min_telemetry_coverage_pct__gte=0) & Q(min_telemetry_coverage_pct__lte=100),
                name="rollout_soakcriteria_coverage_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class GrayBatch(BaseModel):
    class Stage(models.TextChoices):
        PLANNED = "planned", _("planned")
        SOAKING = "soaking", _("soaking")
        PASSED = "passed", _("passed")
        FAILED = "failed", _("failed")
        ADMITTED = "admitted", _("admitted")
        ROLLED_BACK = "rolled_back", _("rolled back")

    Kind = BatchKind

    name = models.CharField(_("name"), max_length=100, unique=True)
    slug = models.SlugField(
        _("slug"), max_length=60, unique=True, help_text=_("the suanchi.io/gray label value")
    )
    kind = models.CharField(_("kind"), max_length=16, choices=BatchKind.choices)
    target_version = models.CharField(_("target version"), max_length=100)
    description = models.TextField(_("description"), blank=True)
    criteria = models.ForeignKey(
        SoakCriteria, on_delete=models.PROTECT, related_name="batches", verbose_name=_("soak criteria")
    )
    nodes = models.ManyToManyField(Node, related_name="gray_batches", verbose_name=_("nodes"))
    baseline_run = models.ForeignKey(
        "BenchmarkRun",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="baseline_of",
        verbose_name=_("baseline benchmark run"),
    )
    stage = models.CharField(
        _("stage"), max_length=12, choices=Stage.choices, default=Stage.PLANNED, db_index=True
    )
    stage_reason = models.CharField(_("reason"), max_length=500, blank=True)
    soak_started_at = models.DateTimeField(_("soak started"), null=True, blank=True)
    soak_ended_at = models.DateTimeField(_("soak ended"), null=True, blank=True)
    decided_at = models.DateTimeField(_("admitted / rolled back"), null=True, blank=True)
    # Cards of the batch's nodes that were unhealthy (lost, degraded, cordoned for a hardware fault)
    # when the soak started: left out of the batch, so the soak judges only what happens during it.
    # [{"device": pk, "card": "node#vendorN", "node": name, "health": ..., "reason": stored text}]
    excluded_devices = models.JSONField(_("cards left out"), default=list, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("gray-release batch")
        verbose_name_plural = _("gray-release batches")
        constraints = [
            models.CheckConstraint(
                condition=Q(stage__in=["planned", "soaking", "passed", "failed", "admitted", "rolled_back"]),
                name="rollout_graybatch_stage_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in BatchKind]), name="rollout_graybatch_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(stage="planned") | Q(soak_started_at__isnull=False),
                name="rollout_graybatch_started_has_start",
            ),
            models.CheckConstraint(
                condition=Q(soak_ended_at__isnull=True) | Q(soak_ended_at__gte=F("soak_started_at")),
                name="rollout_graybatch_soak_ordered",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def layer(self) -> int | None:
        return LAYER_OF_KIND.get(self.kind)


class BenchmarkRun(BaseModel):
    """One measured benchmark (e.g. a training-throughput job) on a node, posted by the benchmark
    harness. A batch's soak compares its runs against the batch's baseline run."""

    name = models.CharField(_("benchmark"), max_length=100, help_text=_("e.g. resnet50-bf16-train"))
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="benchmark_runs")
    batch = models.ForeignKey(
        GrayBatch, null=True, blank=True, on_delete=models.PROTECT, related_name="benchmark_runs"
    )
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="benchmark_runs"
    )
    throughput = models.DecimalField(_("throughput"), max_digits=14, decimal_places=3)
    unit = models.CharField(_("unit"), max_length=40, default="samples/s")
    # A run that names a workload profile also lands in the benchmark library (one model for every source).
    profile = models.ForeignKey(
        "catalog.WorkloadProfile",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="benchmark_runs",
    )
    measurement = models.OneToOneField(
        "benchlib.Measurement", null=True, blank=True, on_delete=models.SET_NULL, related_name="benchmark_run"
    )
    measured_at = models.DateTimeField(_("measured at"), db_index=True)
    source = models.CharField(
        _("source"), max_length=200, blank=True, help_text=_("harness / job that measured it")
    )

    class Meta:
        ordering = ["-measured_at", "-id"]
        verbose_name = _("benchmark run")
        constraints = [
            models.CheckConstraint(
                condition=Q(throughput__gt=0), name="rollout_benchmarkrun_throughput_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.node.name}: {self.throughput} {self.unit}"


class SoakResult(models.Model):
    """A soak evaluation, computed from telemetry rollups, device events and benchmark runs."""

    class Verdict(models.TextChoices):
        PENDING = "pending", _("still soaking")
        PASS = "pass", _("pass")
        FAIL = "fail", _("fail")

    batch = models.ForeignKey(GrayBatch, on_delete=models.CASCADE, related_name="results")
    computed_at = models.DateTimeField(_("computed"), db_index=True)
    verdict = models.CharField(_("verdict"), max_length=8, choices=Verdict.choices)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    soak_hours = models.DecimalField(max_digits=8, decimal_places=2)
    error_events = models.PositiveIntegerField(default=0)
    lost_devices = models.PositiveIntegerField(default=0)
    max_temperature_c = models.FloatField(null=True, blank=True)
    telemetry_coverage_pct = models.DecimalField(max_digits=5, decimal_places=2, default=Decimal("0"))
    throughput_baseline = models.DecimalField(max_digits=14, decimal_places=3, null=True, blank=True)
    throughput_measured = models.DecimalField(max_digits=14, decimal_places=3, null=True, blank=True)
    throughput_drop_pct = models.DecimalField(max_digits=7, decimal_places=2, null=True, blank=True)
    # [{"criterion", "limit", "value", "message"}]
    violations = models.JSONField(default=list, blank=True)
    # What is still missing before the batch can pass, e.g. ["soak time: 20.0 of 72 h"].
    missing = models.JSONField(default=list, blank=True)
    # Per-hour series and the rows behind every figure (event ids, counter increases, benchmark runs).
    evidence = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-computed_at", "-id"]
        verbose_name = _("soak result")
        constraints = [
            models.CheckConstraint(
                condition=Q(verdict__in=["pending", "pass", "fail"]), name="rollout_soakresult_verdict_valid"
            ),
            models.CheckConstraint(
                condition=Q(window_end__gte=F("window_start")), name="rollout_soakresult_window_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.batch} {self.verdict} @ {self.computed_at:%Y-%m-%d %H:%M}"


class UpgradePlan(BaseModel):
    """One upgrade of the stack, in waves ordered by layer."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("upgrade plan")

    def __str__(self) -> str:
        return self.name


class UpgradeWave(BaseModel):
    """One layer of a plan, proven by its gray batch: the wave passes when the batch's soak passes."""

    class State(models.TextChoices):
        PLANNED = "planned", _("planned")
        RUNNING = "running", _("running")
        PASSED = "passed", _("passed")
        FAILED = "failed", _("failed")

    plan = models.ForeignKey(UpgradePlan, on_delete=models.CASCADE, related_name="waves")
    batch = models.OneToOneField(GrayBatch, on_delete=models.PROTECT, related_name="wave")
    layer = models.PositiveSmallIntegerField(_("layer"), choices=Layer.choices)

    class Meta:
        ordering = ["plan", "layer", "id"]
        verbose_name = _("upgrade wave")
        constraints = [
            models.CheckConstraint(condition=Q(layer__in=[1, 2, 3]), name="rollout_upgradewave_layer_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.plan}: {self.get_layer_display()} ({self.batch})"

    @property
    def state(self) -> str:
        return wave_state(self.batch.stage)

    @property
    def state_label(self) -> str:
        """The state in the reader's language (the badge's text)."""
        return str(UpgradeWave.State(self.state).label)


_WAVE_STATE = {
    GrayBatch.Stage.PLANNED: UpgradeWave.State.PLANNED,
    GrayBatch.Stage.SOAKING: UpgradeWave.State.RUNNING,
    GrayBatch.Stage.PASSED: UpgradeWave.State.PASSED,
    GrayBatch.Stage.ADMITTED: UpgradeWave.State.PASSED,
    GrayBatch.Stage.FAILED: UpgradeWave.State.FAILED,
    GrayBatch.Stage.ROLLED_BACK: UpgradeWave.State.FAILED,
}


def wave_state(stage: str) -> str:
    return _WAVE_STATE[stage]


class AutoscalePolicy(BaseModel):
    """Per inference service: seed 001 §5.2's rule (up > 80 % for 5 min, down < 20 % for 30 min)."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="autoscale_policy")
    enabled = models.BooleanField(_("enabled"), default=True)
    up_threshold_pct = models.DecimalField(
        _("scale up above (%)"), max_digits=5, decimal_places=2, default=Decimal("80"), validators=PCT
    )
    up_window_s = models.PositiveIntegerField(
        _("up window (s)"), default=300, validators=[MinValueValidator(60), MaxValueValidator(86400)]
    )
    down_threshold_pct = models.DecimalField(
        _("scale down below (%)"), max_digits=5, decimal_places=2, default=Decimal("20"), validators=PCT
    )
    down_window_s = models.PositiveIntegerField(
        _("down window (s)"), default=1800, validators=[MinValueValidator(60), MaxValueValidator(86400)]
    )
    cooldown_s = models.PositiveIntegerField(
        _("cooldown (s)"), default=600, validators=[MaxValueValidator(86400)]
    )
    buffer_pct = models.DecimalField(
        _("buffer (%)"),
        max_digits=5,
        decimal_places=2,
        default=Decimal("10"),
        validators=PCT,
        help_text=_("a scale-down must leave utilization this far below the up threshold"),
    )
    min_replicas = models.PositiveSmallIntegerField(
        _("minimum replicas"), default=1, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    max_replicas = models.PositiveSmallIntegerField(
        _("maximum replicas"), default=4, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    step = models.PositiveSmallIntegerField(
        _("step"), default=1, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    last_scaled_at = models.DateTimeField(null=True, blank=True)
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    last_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["job_id"]
        verbose_name = _("autoscaling policy")
        verbose_name_plural = _("autoscaling policies")
        constraints = [
            models.CheckConstraint(
                condition=Q(down_threshold_pct__lt=F("up_threshold_pct")),
                name="rollout_autoscalepolicy_down_below_up",
            ),
            models.CheckConstraint(
                condition=Q(min_replicas__gte=1) & Q(max_replicas__gte=F("min_replicas")),
                name="rollout_autoscalepolicy_replica_bounds",
            ),
            models.CheckConstraint(condition=Q(step__gte=1), name="rollout_autoscalepolicy_step_positive"),
        ]

    def __str__(self) -> str:
        return f"autoscale {self.job}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError
        from django.utils.translation import gettext

        if self.up_threshold_pct is None or self.down_threshold_pct is None:
            return
        problems = self.as_policy().problems()
        if self.job_id and self.job.kind != "inference":
            problems["job"] = gettext("job %(job)s is a %(kind)s job; only inference services autoscale") % {
                "job": self.job,
                "kind": self.job.kind,
            }
        if problems:
            raise ValidationError(problems)

    def as_policy(self):
        from apps.rollout.autoscale import Policy

        return Policy(
            up_threshold_pct=float(self.up_threshold_pct),
            up_window_s=int(self.up_window_s or 0),
            down_threshold_pct=float(self.down_threshold_pct),
            down_window_s=int(self.down_window_s or 0),
            cooldown_s=int(self.cooldown_s or 0),
            min_replicas=int(self.min_replicas or 0),
            max_replicas=int(self.max_replicas or 0),
            step=int(self.step or 0),
            buffer_pct=float(self.buffer_pct or 0),
        )


class ScaleDecision(models.Model):
    """Every replica change the autoscaler made or tried (holds are not recorded, only the last one)."""

    class Action(models.TextChoices):
        UP = "up", _("scale up")
        DOWN = "down", _("scale down")

    policy = models.ForeignKey(AutoscalePolicy, on_delete=models.CASCADE, related_name="decisions")
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="scale_decisions")
    created_at = models.DateTimeField(_("at"), db_index=True)
    action = models.CharField(_("action"), max_length=4, choices=Action.choices)
    from_replicas = models.PositiveSmallIntegerField()
    to_replicas = models.PositiveSmallIntegerField(help_text=_("asked"))
    reached_replicas = models.PositiveSmallIntegerField(help_text=_("what the cluster had room for"))
    reason = models.CharField(max_length=500)
    up_window_pct = models.FloatField(null=True, blank=True)
    down_window_pct = models.FloatField(null=True, blank=True)
    projected_pct = models.FloatField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    actor_label = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("scale decision")
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=["up", "down"]), name="rollout_scaledecision_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.job_id} {self.from_replicas}→{self.reached_replicas} @ {self.created_at:%Y-%m-%d %H:%M}"
        )
