"""Measurements of workload profiles (the benchmark library) and coefficient proposals.

One model for every source (benchmark jobs, jobs that report their throughput, gray-batch benchmark
runs): a ``Measurement`` always says what was measured (profile, device model, template or share of a
card, how many cards), where (device, node, driver, runtime), when, how many runs and their spread,
and whether it is synthetic (the simulated backend's demo results).
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import ComputeTemplate, DeviceModel, WorkloadProfile
from apps.core.models import BaseModel
from apps.inventory.models import Device, Node
from apps.jobs.models import Job


class Measurement(models.Model):
    class Source(models.TextChoices):
        BENCHMARK = "benchmark", _("benchmark job")
        JOB = "job", _("job report")
        GRAY_BATCH = "gray_batch", _("gray-batch benchmark run")
        IMPORTED = "imported", _("imported")

    created_at = models.DateTimeField(_("recorded"), auto_now_add=True, db_index=True)
    profile = models.ForeignKey(WorkloadProfile, on_delete=models.PROTECT, related_name="measurements")
    device_model = models.ForeignKey(DeviceModel, on_delete=models.PROTECT, related_name="measurements")
    template = models.ForeignKey(
        ComputeTemplate, null=True, blank=True, on_delete=models.PROTECT, related_name="measurements"
    )
    # Share of one card each instance had, in percent (100 = a whole card), and how many cards / slices.
    compute_share = models.DecimalField(_("share of a card (%)"), max_digits=6, decimal_places=2, default=100)
    cards = models.PositiveSmallIntegerField(_("cards or slices"), default=1)
    throughput = models.DecimalField(_("throughput"), max_digits=16, decimal_places=4)
    p99_latency_ms = models.DecimalField(
        _("p99 latency (ms)"), max_digits=10, decimal_places=2, null=True, blank=True
    )
    runs = models.PositiveSmallIntegerField(_("runs"), default=1)
    spread_pct = models.DecimalField(
        _("spread (%)"),
        max_digits=6,
        decimal_places=2,
        null=True,
        blank=True,
        help_text=_("(max - min) / mean of the runs, in percent"),
    )
    synthetic = models.BooleanField(_("synthetic"), default=False, db_index=True)
    source = models.CharField(_("source"), max_length=12, choices=Source.choices)
    source_label = models.CharField(_("measured by"), max_length=200, blank=True)
    device = models.ForeignKey(
        Device, null=True, blank=True, on_delete=models.SET_NULL, related_name="measurements"
    )
    node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="measurements"
    )
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="measurements"
    )
    driver_version = models.CharField(_("driver"), max_length=60, blank=True)
    runtime = models.CharField(_("runtime"), max_length=60, blank=True)
    measured_at = models.DateTimeField(_("measured at"), db_index=True)
    # A job report counts fleet-wide (rankings, coefficient proposals) only once platform staff verified it.
    verified_at = models.DateTimeField(_("verified"), null=True, blank=True)
    verified_by = models.CharField(_("verified by"), max_length=150, blank=True)

    class Meta:
        ordering = ["-measured_at", "-id"]
        verbose_name = _("measurement")
        constraints = [
            models.CheckConstraint(
                condition=Q(throughput__gt=0), name="benchlib_measurement_throughput_positive"
            ),
            models.CheckConstraint(
                condition=Q(compute_share__gt=0) & Q(compute_share__lte=100),
                name="benchlib_measurement_share_range",
            ),
            models.CheckConstraint(
                condition=Q(cards__gte=1) & Q(runs__gte=1), name="benchlib_measurement_counts"
            ),
            models.CheckConstraint(
                condition=Q(p99_latency_ms__isnull=True) | Q(p99_latency_ms__gt=0),
                name="benchlib_measurement_latency_positive",
            ),
            # A job reports its throughput once per attempt (a retry may report again).
            models.UniqueConstraint(
                fields=["job", "source_label"],
                condition=Q(job__isnull=False),
                name="benchlib_measurement_one_per_job",
            ),
        ]
        indexes = [models.Index(fields=["profile", "device_model"], name="benchlib_meas_profile_model")]

    def __str__(self) -> str:
        return f"{self.profile.key} on {self.device_model.name}: {self.throughput} {self.profile.unit}"

    @property
    def trusted(self) -> bool:
        """Made by the platform or staff (benchmark runs), or a job report staff verified."""
        return self.source in TRUSTED_SOURCES or self.verified_at is not None

    @property
    def per_card(self) -> Decimal:
        """Throughput of one whole-card equivalent: the measurement ÷ (cards × share)."""
        return Decimal(self.throughput) / (Decimal(self.cards) * Decimal(self.compute_share) / 100)


# Sources only the platform or platform staff write: the simulated backend's results and staff-posted
# benchmark jobs (``benchmark``), gray-batch runs (staff-only API), imports. A project's own report is
# ``job`` — benchmark-kind jobs of members included — and counts fleet-wide only once verified.
TRUSTED_SOURCES = (Measurement.Source.BENCHMARK, Measurement.Source.GRAY_BATCH, Measurement.Source.IMPORTED)


def trusted_q() -> Q:
    """The measurements that rank options fleet-wide and may back a coefficient proposal."""
    return Q(source__in=TRUSTED_SOURCES) | Q(verified_at__isnull=False)


class CoefficientProposal(BaseModel):
    """A compute coefficient the measurements contradict, proposed for staff to accept or dismiss.

    Accepting versions the coefficient with an effective date (never today or earlier), so closed months
    and metering already done are never rewritten."""

    class State(models.TextChoices):
        OPEN = "open", _("open")
        ACCEPTED = "accepted", _("accepted")
        DISMISSED = "dismissed", _("dismissed")

    device_model = models.ForeignKey(
        DeviceModel, on_delete=models.PROTECT, related_name="coefficient_proposals"
    )
    reference_model = models.ForeignKey(DeviceModel, on_delete=models.PROTECT, related_name="+")
    current_value = models.DecimalField(_("coefficient in force"), max_digits=8, decimal_places=4)
    proposed_value = models.DecimalField(_("proposed coefficient"), max_digits=8, decimal_places=4)
    # {profile key: measured ratio to the reference model}
    evidence = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN, db_index=True)
    effective_from = models.DateField(_("effective from"), null=True, blank=True)
    decided_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("coefficient proposal")
        constraints = [
            models.UniqueConstraint(
                fields=["device_model"],
                condition=Q(state="open"),
                name="benchlib_one_open_proposal_per_model",
            ),
            models.CheckConstraint(condition=Q(proposed_value__gt=0), name="benchlib_proposal_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.device_model.name}: {self.current_value} → {self.proposed_value} ({self.state})"
