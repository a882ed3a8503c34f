"""Shared base pieces: timestamps and the audit trail."""

from __future__ import annotations

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.utils.translation import gettext_lazy as _


class BaseModel(models.Model):
    created_at = models.DateTimeField(_("created"), auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        abstract = True


class ChangeRecord(models.Model):
    """One audited change, written by the service that made it (web request, admin, worker or agent)."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="change_records",
    )
    # Who acted when no user did: "worker", "agent:<cluster>", "command", "system".
    actor_label = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=80, db_index=True)
    content_type = models.ForeignKey(ContentType, on_delete=models.PROTECT, related_name="+")
    object_id = models.CharField(max_length=64, db_index=True)
    object_repr = models.CharField(max_length=300)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["content_type", "object_id"], name="core_change_object_idx")]
        verbose_name = _("change record")

    def __str__(self) -> str:
        return f"{self.action} {self.object_repr}"


class BackgroundRun(models.Model):
    """One long operation run by a worker (a ledger import, a metric backfill, a month close): its
    state, its progress (done/total and a message), its outcome (``result`` or ``error``).

    ``kind`` names the operation as "<app>.<operation>" (``inventory.ledger_import``); core knows no
    kind, the callers pass them. Progress while the work runs is published through the cache by
    ``apps.core.runs.run_progress`` (a page polling the run must see it while the work's own
    transaction is still open); the row keeps the last progress once the run is over."""

    class Status(models.TextChoices):
        QUEUED = "queued", _("queued")
        RUNNING = "running", _("running")
        SUCCEEDED = "succeeded", _("succeeded")
        FAILED = "failed", _("failed")

    FINISHED = (Status.SUCCEEDED, Status.FAILED)

    kind = models.CharField(_("kind"), max_length=60, db_index=True)
    status = models.CharField(_("status"), max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    progress_message = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    params = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="background_runs",
    )
    # Who asked when no user did ("worker", "command:close_month"); the username otherwise.
    actor_label = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["kind", "status"], name="core_run_kind_status_idx")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["queued", "running", "succeeded", "failed"]),
                name="core_backgroundrun_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(progress_total=0)
                | models.Q(progress_done__lte=models.F("progress_total")),
                name="core_backgroundrun_done_within_total",
            ),
            # Finished exactly when succeeded or failed.
            models.CheckConstraint(
                condition=(
                    models.Q(status__in=["succeeded", "failed"], finished_at__isnull=False)
                    | models.Q(status__in=["queued", "running"], finished_at__isnull=True)
                ),
                name="core_backgroundrun_finished_when_over",
            ),
        ]
        verbose_name = _("background run")

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def percent(self) -> int:
        if self.status == self.Status.SUCCEEDED:
            return 100
        if not self.progress_total:
            return 0
        return min(100, int(self.progress_done * 100 / self.progress_total))
