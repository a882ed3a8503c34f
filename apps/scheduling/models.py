"""Decision traces (why a job got its cards, or why it waits). Allocations live in apps.jobs, the push
outbox (``PushAction``) and the simulated clusters' state in apps.clusters."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.jobs.models import Job


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
