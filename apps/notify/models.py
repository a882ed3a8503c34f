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
    # Alerts of the rules on measurements (apps/notify/alerts.py): a rule names the subscriptions it
    # notifies, and each of them hears the firing and/or the resolving as its events say.
    ALERT_FIRING = "alert.firing", _("alert firing")
    ALERT_RESOLVED = "alert.resolved", _("alert resolved")


class Subscription(BaseModel):
    """Who hears about what: a project's subscription (project admins manage it, it hears about that
    project) or a user's own (it hears about the jobs the user submitted; staff also about the fleet)."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook", _("webhook")
        EMAIL = "email", _("e-mail")
        # Group robots of the chat platforms Chinese teams use (apps/notify/robots.py).
        DINGTALK = "dingtalk", _("DingTalk group robot")
        WECOM = "wecom", _("WeCom group robot")
        FEISHU = "feishu", _("Feishu group robot")

    ROBOTS = ("dingtalk", "wecom", "feishu")

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
    # Webhook: the HMAC-SHA256 key of the bodies (X-Suanchi-Signature), made here and shown to the owner
    # once. DingTalk / Feishu robot: the robot's signing secret, typed in from the robot's security
    # settings (blank: the robot does not check signatures). Never shown again, never in the API list.
    secret = models.CharField(max_length=200, blank=True)
    # The language its messages are written in; blank: the owner's own (their preference), else the
    # platform's. A group robot speaks to a team, whose language may differ from its owner's.
    language = models.CharField(_("language"), max_length=10, blank=True, choices=settings.LANGUAGES)
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


class AlertRule(BaseModel):
    """A condition on measurements that opens an alert per subject (a card, a quota, a cluster) once it
    has held for ``duration_s`` and resolves it once it has cleared by ``clear_margin`` for
    ``clear_duration_s`` (hysteresis: a value wavering around the threshold neither fires nor resolves
    it again and again). Firing and resolving notify the rule's ``subscriptions``. The meaning of the
    threshold per kind is in ``apps.notify.alerts.KINDS``."""

    class Kind(models.TextChoices):
        UTILIZATION_LOW = "utilization_low", _("utilization below a floor on an allocated card")
        TEMPERATURE = "temperature", _("card temperature")
        DEVICE_ERRORS = "device_errors", _("ECC / XID errors")
        CARD_SILENT = "card_silent", _("card gone silent")
        QUOTA_USED = "quota_used", _("quota nearly used")
        CLUSTER_UNREACHABLE = "cluster_unreachable", _("cluster unreachable")

    name = models.CharField(_("name"), max_length=100)
    kind = models.CharField(_("kind"), max_length=24, choices=Kind.choices)
    threshold = models.FloatField(_("threshold"))
    duration_s = models.PositiveIntegerField(_("held for (s)"), default=0)
    clear_margin = models.FloatField(_("clear margin"), default=0)
    clear_duration_s = models.PositiveIntegerField(_("cleared for (s)"), default=0)
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules"
    )
    cluster = models.ForeignKey(
        "inventory.Cluster", null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules"
    )
    subscriptions = models.ManyToManyField(Subscription, blank=True, related_name="alert_rules")
    enabled = models.BooleanField(_("enabled"), default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name", "pk"]
        verbose_name = _("alert rule")
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    kind__in=[
                        "utilization_low",
                        "temperature",
                        "device_errors",
                        "card_silent",
                        "quota_used",
                        "cluster_unreachable",
                    ]
                ),
                name="notify_alertrule_kind_valid",
            ),
            models.CheckConstraint(condition=Q(clear_margin__gte=0), name="notify_alertrule_margin_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Alert(models.Model):
    """One rule's condition on one subject. ``pending``: it holds, not yet for the rule's duration;
    ``firing``: notified; ``resolved``: cleared and notified (kept as history). At most one open
    (pending or firing) alert per rule and subject. ``message`` / ``resolved_message`` are registered
    stored texts (English in the row, shown in the reader's language: apps/core/stored_text.py)."""

    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        FIRING = "firing", _("firing")
        RESOLVED = "resolved", _("resolved")

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    subject = models.CharField(max_length=60)  # "device:12", "quota:3", "cluster:2"
    subject_label = models.CharField(max_length=200)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING, db_index=True)
    since = models.DateTimeField()  # the condition holds since
    fired_at = models.DateTimeField(null=True, blank=True)
    clear_since = models.DateTimeField(null=True, blank=True)  # firing, and cleared by the margin since
    resolved_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)  # the last value evaluated
    evaluated_at = models.DateTimeField()
    message = models.CharField(max_length=500, blank=True)
    resolved_message = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-since", "-pk"]
        verbose_name = _("alert")
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(state__in=["pending", "firing"]),
                name="notify_alert_one_open_per_subject",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "firing", "resolved"]), name="notify_alert_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id}/{self.subject} ({self.state})"
