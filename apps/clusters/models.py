"""What stands between a decision and a cluster: the push outbox and the simulated clusters' state.

Both models came from the scheduling app and kept their tables (``db_table``), constraint names and
index names: the move was a state-only migration (``SeparateDatabaseAndState``).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.inventory.models import Cluster
from apps.jobs.models import Job


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
    # Indexed by ``scheduling_push_stream_seq_idx`` (below), not ``db_index``: that was a second,
    # ``varchar_pattern_ops`` index no query reads (no LIKE on streams).
    stream = models.CharField(max_length=300, default="")
    # No index of its own: ``scheduling_pushaction_unique_seq`` leads with the cluster and serves its
    # lookups (the pusher's per-cluster filters, PROTECT's check when a cluster is deleted). A
    # scheduling cycle inserts thousands of rows: each index dropped is one entry fewer per row.
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, related_name="push_actions", db_index=False
    )
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
            # A stream's actions in order, and its next sequence number per attempt (the outbox's MAX).
            models.Index(fields=["stream", "attempt", "seq"], name="scheduling_push_stream_seq_idx"),
        ]
        # Moved from the scheduling app: the table, its constraint and index names stayed.
        db_table = "scheduling_pushaction"
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
        db_table = "scheduling_simulatedcluster"
        verbose_name = _("simulated cluster")

    def __str__(self) -> str:
        return f"simulation of {self.cluster_id}"


class ClusterPreference(models.Model):
    """The order in which the engine offers a job to clusters (lower first), e.g. on-prem 0, cloud 10.

    A job never spans clusters (``apps.scheduling.engine.clusters``): the engine tries the clusters of
    the lowest preference first and, among clusters of equal preference, takes the one its placement
    policy scores best - like MultiKueue's dispatcher, which offers a workload to its worker clusters
    in a configured order. A cluster without a row has preference 0.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="dispatch_preference")
    preference = models.SmallIntegerField(
        _("dispatch preference"),
        default=0,
        help_text=_("lower first; clusters of equal preference go by the placement policy"),
    )

    class Meta:
        verbose_name = _("cluster preference")

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.preference}"


class ClusterLoop(models.Model):
    """How a periodic per-cluster loop (reconcile, push) last went for one cluster: written by
    ``apps.clusters.health`` after every run, never typed in.

    A run that could not reach the cluster (no answer within the client timeout, connection refused
    or reset, the API server answering 5xx) counts as a failure: ``consecutive_failures`` grows and
    the next try waits ``next_attempt_at`` (exponential backoff), so an unreachable cluster costs one
    bounded timeout per backoff period, while every other cluster's loop goes on in its own task.
    """

    class Loop(models.TextChoices):
        RECONCILE = "reconcile", _("reconcile")
        PUSH = "push", _("push")

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="loops")
    loop = models.CharField(max_length=20, choices=Loop.choices)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # No try before this (set after a failure); null: due at every period.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "loop"], name="clusters_clusterloop_unique_loop"),
            models.CheckConstraint(
                condition=Q(loop__in=["reconcile", "push"]), name="clusters_clusterloop_loop_valid"
            ),
        ]
        verbose_name = _("cluster loop state")

    def __str__(self) -> str:
        return f"{self.loop} of {self.cluster_id}: {self.consecutive_failures} failure(s)"
