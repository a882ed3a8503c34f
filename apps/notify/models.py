"""Subscriptions and the delivery outbox of notifications."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Project
from apps.core.models import BaseModel


class Event(models.TextChoices):
    JOB_FAILED = "job.failed", _("job failed")
    JOB_PREEMPTED = "job.preempted", _("job preempted")
    JOB_SUCCEEDED = "job.succeeded", _("job succeeded")
    NODE_QUARANTINED = "node.quarantined", _("node quarantined")
    QUOTA_NEARLY_EXHAUSTED = "quota.nearly_exhausted", _("quota nearly exhausted")
    BILL_FINALIZED = "bill.finalized", _("bill finalized")
    GRAY_BATCH_FAILED = "gray_batch.failed", _("gray batch failed")


class Subscription(BaseModel):
    """Who hears about what: a project's subscription (project admins manage it, it hears about that
    project) or a user's own (it hears about the jobs the user submitted; staff also about the fleet)."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook", _("webhook")
        EMAIL = "email", _("e-mail")

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="subscriptions"
    )
    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="subscriptions",
        help_text=_("blank: a personal subscription"),
    )
    channel = models.CharField(_("channel"), max_length=8, choices=Channel.choices)
    target = models.CharField(_("URL or address"), max_length=500)
    events = models.JSONField(_("events"), default=list)
    # HMAC-SHA256 key of webhook bodies (X-Suanchi-Signature); shown to the owner, never in the API list.
    secret = models.CharField(max_length=64, blank=True)
    active = models.BooleanField(_("active"), default=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("subscription")

    def __str__(self) -> str:
        return f"{self.channel} → {self.target}"

    @staticmethod
    def new_secret() -> str:
        return secrets.token_hex(32)


class Delivery(models.Model):
    """One notification to one subscription: written in the transaction of the event (outbox), sent
    after commit, retried with backoff; ``key`` makes a repeated event a no-op (at least once, once)."""

    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        DELIVERED = "delivered", _("delivered")
        FAILED = "failed", _("failed")

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40, choices=Event.choices)
    key = models.CharField(max_length=200)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(db_index=True)
    last_error = models.CharField(max_length=500, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        constraints = [
            models.UniqueConstraint(fields=["subscription", "key"], name="notify_delivery_once_per_key"),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "delivered", "failed"]), name="notify_delivery_state"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.subscription_id} ({self.state})"
