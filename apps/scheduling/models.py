"""Allocations (what runs where) and decision traces (why)."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import Isolation
from apps.inventory.models import Cluster, Device, Node
from apps.jobs.models import Job


class Allocation(models.Model):
    """A job's share of one device for one replica. Active while ``released_at`` is null.

    The engine never over-allocates; the database backs it up: a whole card has at most one active
    allocation (partial unique index), shares and memory are bounded per row, and the scheduling
    service re-checks each device's totals under a row lock before inserting.
    """

    Isolation = Isolation

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="allocations")
    device = models.ForeignKey(Device, on_delete=models.PROTECT, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    replica = models.PositiveSmallIntegerField(default=0)
    attempt = models.PositiveSmallIntegerField(default=0)
    whole_card = models.BooleanField(default=False)
    memory_mib = models.PositiveIntegerField()
    # Compute share in milli of one card: 1000 = the whole card.
    compute_milli = models.PositiveIntegerField()
    isolation = models.CharField(max_length=8, choices=Isolation.choices, default=Isolation.HARD)
    partition_profile = models.CharField(max_length=40, blank=True)
    # Compute units this row holds: the card model's coefficient on the start day × the share
    # (compute_milli / 1000). Quotas count it; billing multiplies it by hours.
    compute_units = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    # Granted beyond the project's guarantee from idle lendable capacity: preemptible (reclaim).
    borrowed = models.BooleanField(default=False)
    trace_id = models.UUIDField(db_index=True)
    started_at = models.DateTimeField(db_index=True)
    released_at = models.DateTimeField(null=True, blank=True, db_index=True)
    release_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["device"],
                condition=Q(released_at__isnull=True, whole_card=True),
                name="scheduling_allocation_one_active_whole_card",
            ),
            models.UniqueConstraint(
                fields=["job", "device", "replica", "attempt"],
                name="scheduling_allocation_unique_slot",
            ),
            models.CheckConstraint(
                condition=Q(compute_milli__gte=1) & Q(compute_milli__lte=1000),
                name="scheduling_allocation_compute_range",
            ),
            models.CheckConstraint(
                condition=Q(whole_card=False) | Q(compute_milli=1000),
                name="scheduling_allocation_whole_card_is_whole",
            ),
            models.CheckConstraint(
                condition=Q(released_at__isnull=True) | Q(released_at__gte=F("started_at")),
                name="scheduling_allocation_release_after_start",
            ),
            models.CheckConstraint(
                condition=Q(isolation__in=["hard", "shared"]), name="scheduling_allocation_isolation_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["device"], condition=Q(released_at__isnull=True), name="scheduling_alloc_active_idx"
            ),
        ]
        verbose_name = _("allocation")

    def __str__(self) -> str:
        return f"job {self.job_id} on device {self.device_id} ({self.compute_milli}m, {self.memory_mib} MiB)"


class DecisionTrace(models.Model):
    """One scheduling decision (调度轨迹): every step with its reason, the top candidates, the choice."""

    class Outcome(models.TextChoices):
        PLACED = "placed", _("placed")
        PENDING = "pending", _("pending")
        CONFLICT = "conflict", _("lost a race; retried next cycle")
        REJECTED = "rejected", _("rejected")

    trace_id = models.UUIDField(unique=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="traces")
    cycle_id = models.UUIDField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    policy = models.CharField(max_length=40)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    explanation = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    steps = models.JSONField(default=list)
    candidates = models.JSONField(default=list)
    placement = models.JSONField(null=True, blank=True)
    duration_us = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=["placed", "pending", "conflict", "rejected"]),
                name="scheduling_decisiontrace_outcome_valid",
            ),
        ]
        verbose_name = _("decision trace")

    def __str__(self) -> str:
        return f"{self.trace_id} {self.outcome}"


class PushAction(models.Model):
    """Outbox row: one object to apply to (or delete from) a cluster for a job's attempt.

    Written inside the scheduling transaction; a worker applies a job's pending actions in ``seq``
    order after commit, with no database transaction open around the network call.
    """

    class Verb(models.TextChoices):
        APPLY = "apply", _("apply")
        DELETE = "delete", _("delete")
        PATCH = "patch", _("patch node")

    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        APPLIED = "applied", _("applied")
        FAILED = "failed", _("failed")
        # Never sent: a newer write of the same object (or a delete of the attempt) replaced it.
        SUPERSEDED = "superseded", _("superseded")

    # A job's workload objects, or — with no job — one standalone object (a node's labels and
    # taints, a project's ResourceQuota). ``stream`` orders the actions: "job:<id>" or "<kind>:<ns>/<name>".
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.PROTECT, related_name="push_actions")
    stream = models.CharField(max_length=300, db_index=True, default="")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="push_actions")
    attempt = models.PositiveSmallIntegerField(default=0)
    seq = models.PositiveSmallIntegerField(default=0)
    verb = models.CharField(max_length=8, choices=Verb.choices, default=Verb.APPLY)
    object = models.JSONField(default=dict, blank=True)
    kind = models.CharField(max_length=40)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["stream", "attempt", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "stream", "attempt", "seq"], name="scheduling_pushaction_unique_seq"
            ),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "applied", "failed", "superseded"]),
                name="scheduling_pushaction_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(verb__in=["apply", "delete", "patch"]), name="scheduling_pushaction_verb_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="scheduling_push_pending_idx",
            ),
        ]
        verbose_name = _("push action")

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.verb} {self.kind} {where} ({self.state})"


class SimulatedCluster(models.Model):
    """The state of a simulated cluster, shared by every worker process and kept across restarts.

    The demo's web, worker and beat processes all see one cluster: each backend call loads this row
    under a lock, advances the simulated clock to the wall clock (times ``SIMULATED_TIME_SCALE``),
    acts, and stores the state back.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="simulation")
    state = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("simulated cluster")

    def __str__(self) -> str:
        return f"simulation of {self.cluster_id}"
