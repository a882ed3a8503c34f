"""Alert rules on measurements, and the hysteresis that moves their alerts.

A rule (``AlertRule``) watches subjects of one kind — allocated cards, cards, project quotas,
clusters — in an optional project / cluster scope. Each evaluation
(``apps.telemetry.alerts.alerts_evaluate``, the beat task ``worker.tasks.notify.alerts_evaluate_task``
every minute) measures every subject and ``rule_evaluate`` moves its alert through
``pending → firing → resolved``:

* **fire** only after the condition has held, at every evaluation, for the rule's ``duration_s``
  (a value back on the good side of the threshold while pending forgets the pending alert);
* **resolve** only once the value has cleared the threshold **by** ``clear_margin`` and stayed so
  for ``clear_duration_s``; a value between the threshold and the margin keeps the alert firing
  (and resets the clear period). A value wavering around the threshold therefore neither fires nor
  resolves again and again: one firing and one resolved notification per episode;
* a subject without a fresh measurement is **unknown**: its alert keeps its state (no data is not
  good news); a subject that leaves the rule (a card released, a quota deleted) resolves its alert.

At most one open (pending or firing) alert per rule and subject (a partial unique constraint).
Firing and resolving write ``Delivery`` rows (the outbox of apps/notify/services.py) for the rule's
subscriptions whose events include ``alert.firing`` / ``alert.resolved``; the texts are registered
stored texts, rendered in every platform language in the payload, and sent in each subscriber's.

What each kind measures and what its threshold means: ``apps.telemetry.alerts`` (the measurements
read cards, allocations, quotas and clusters, which sit above notify); the rule is evaluated there and
its alerts moved here (``rule_evaluate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from apps.accounts.models import Project
from apps.core.audit import change_record_create
from apps.core.errors import ValidationFailed
from apps.core.permissions import require_staff
from apps.core.stored_text import localize, stored
from apps.core.tasks import enqueue_on_commit
from apps.notify.models import Alert, AlertRule, Delivery, Event, Subscription

Kind = AlertRule.Kind

MAX_DURATION_S = 30 * 86400

# What the alert says (registered stored texts: English in the row, the reader's language on display).
UTIL_LOW_FIRING = stored(
    "Card %(device)s on node %(node)s (project %(project)s) has been below %(threshold)s%% utilization "
    "for %(minutes)d minutes: %(value)s%% now."
)
UTIL_LOW_RESOLVED = stored(
    "Card %(device)s on node %(node)s (project %(project)s) is back to %(value)s%% utilization."
)
TEMP_FIRING = stored(
    "Card %(device)s on node %(node)s is at %(value)s °C, at or above %(threshold)s °C for %(minutes)d minutes."
)
TEMP_RESOLVED = stored("Card %(device)s on node %(node)s has cooled down to %(value)s °C.")
ERRORS_FIRING = stored(
    "Card %(device)s on node %(node)s reported %(value)s hardware error(s) (ECC/XID) in the last "
    "%(minutes)d minutes."
)
ERRORS_RESOLVED = stored(
    "Card %(device)s on node %(node)s: hardware errors (ECC/XID) have stopped (%(value)s in the last "
    "%(minutes)d minutes)."
)
SILENT_FIRING = stored("Card %(device)s on node %(node)s has sent no measurement for %(value)s minutes.")
SILENT_RESOLVED = stored("Card %(device)s on node %(node)s sends measurements again.")
QUOTA_FIRING = stored(
    "Project %(project)s uses %(value)s%% of what its quota allows (alert at %(threshold)s%%)."
)
QUOTA_RESOLVED = stored("Project %(project)s is back to %(value)s%% of what its quota allows.")
CLUSTER_FIRING = stored(
    "Cluster %(cluster)s is unreachable: %(value)s failed passes in a row, for %(minutes)d minutes."
)
CLUSTER_RESOLVED = stored("Cluster %(cluster)s is reachable again.")
SUBJECT_GONE = stored("%(subject)s is no longer watched by this rule (released, removed or out of scope).")
# The line a notification carries: the rule's name (a person's words) and the alert's text.
NOTIFICATION = gettext_noop("Alert %(rule)s: %(text)s")


@dataclass(frozen=True)
class KindSpec:
    below: bool  # the condition is value < threshold (else value >= threshold)
    lowest: float  # the threshold's range
    highest: float
    unit: str
    firing: str
    resolved: str
    hold: bool = True  # False: fire at once (the duration is the look-back window)
    scopes: tuple[str, ...] = ("project", "cluster")

    def bad(self, value: float, threshold: float) -> bool:
        return value < threshold if self.below else value >= threshold

    def cleared(self, value: float, threshold: float, margin: float) -> bool:
        return value >= threshold + margin if self.below else value <= threshold - margin


KINDS: dict[str, KindSpec] = {
    Kind.UTILIZATION_LOW: KindSpec(True, 0.0, 100.0, "%", UTIL_LOW_FIRING, UTIL_LOW_RESOLVED),
    Kind.TEMPERATURE: KindSpec(False, 1.0, 150.0, "°C", TEMP_FIRING, TEMP_RESOLVED),
    Kind.DEVICE_ERRORS: KindSpec(False, 1.0, 1e6, "", ERRORS_FIRING, ERRORS_RESOLVED, hold=False),
    Kind.CARD_SILENT: KindSpec(False, 1.0, 10080.0, "min", SILENT_FIRING, SILENT_RESOLVED),
    Kind.QUOTA_USED: KindSpec(False, 1.0, 1000.0, "%", QUOTA_FIRING, QUOTA_RESOLVED, scopes=("project",)),
    Kind.CLUSTER_UNREACHABLE: KindSpec(
        False, 1.0, 1e6, "", CLUSTER_FIRING, CLUSTER_RESOLVED, scopes=("cluster",)
    ),
}


# ---------------------------------------------------------------------------- rules


def _number(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValidationFailed(
            _("%(field)s is not a number.") % {"field": name}, details={name: ["not a number"]}
        ) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValidationFailed(
            _("%(field)s is not a number.") % {"field": name}, details={name: ["not a number"]}
        )
    return number


def _seconds(value: Any, name: str) -> int:
    number = _number(value, name)
    if number < 0 or number > MAX_DURATION_S or number != int(number):
        raise ValidationFailed(
            _("%(field)s is a whole number of seconds from 0 to %(most)s.")
            % {"field": name, "most": MAX_DURATION_S},
            details={name: ["out of range"]},
        )
    return int(number)


@transaction.atomic
def alert_rule_create(
    *,
    actor,
    name: str,
    kind: str,
    threshold: Any,
    duration_s: Any = 0,
    clear_margin: Any = 0,
    clear_duration_s: Any = 0,
    project: Project | None = None,
    cluster: Any = None,  # an apps.inventory Cluster (above notify: not imported here)
    subscriptions: list[Subscription] | tuple = (),
) -> AlertRule:
    """A new rule (platform staff only). Bad input: ``ValidationFailed`` naming the field, nothing
    written."""
    require_staff(actor, message=_("Only platform staff manage alert rules."))
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationFailed(
            _("Give the rule a name of 1 to 100 characters."), details={"name": ["required"]}
        )
    spec = KINDS.get(kind)
    if spec is None:
        raise ValidationFailed(
            _("Choose a kind of alert (%(known)s).") % {"known": ", ".join(KINDS)},
            details={"kind": ["unknown"]},
        )
    threshold = _number(threshold, "threshold")
    if not spec.lowest <= threshold <= spec.highest:
        raise ValidationFailed(
            _("The threshold of this kind is from %(low)s to %(high)s %(unit)s.")
            % {"low": f"{spec.lowest:g}", "high": f"{spec.highest:g}", "unit": spec.unit},
            details={"threshold": ["out of range"]},
        )
    margin = _number(clear_margin, "clear_margin")
    if margin < 0:
        raise ValidationFailed(
            _("The clear margin cannot be negative."), details={"clear_margin": ["negative"]}
        )
    reachable = threshold + margin <= spec.highest if spec.below else threshold - margin >= 0
    if not reachable:
        raise ValidationFailed(
            _("With this clear margin the alert could never resolve: the value would have to pass %(edge)s.")
            % {"edge": f"{threshold + margin if spec.below else threshold - margin:g}"},
            details={"clear_margin": ["unreachable"]},
        )
    duration = _seconds(duration_s, "duration_s")
    clear_duration = _seconds(clear_duration_s, "clear_duration_s")
    if project is not None and "project" not in spec.scopes:
        raise ValidationFailed(
            _("Alerts of this kind are not scoped by project."), details={"project": ["not for this kind"]}
        )
    if cluster is not None and "cluster" not in spec.scopes:
        raise ValidationFailed(
            _("Alerts of this kind are not scoped by cluster."), details={"cluster": ["not for this kind"]}
        )
    subscriptions = list(subscriptions)
    deaf = [s for s in subscriptions if not {Event.ALERT_FIRING, Event.ALERT_RESOLVED} & set(s.events or [])]
    if deaf:
        raise ValidationFailed(
            _("Subscription %(target)s takes no alert events: add “alert firing” to it first.")
            % {"target": deaf[0].target[:100]},
            details={"subscriptions": ["no alert events"]},
        )
    rule = AlertRule.objects.create(
        name=name,
        kind=kind,
        threshold=threshold,
        duration_s=duration,
        clear_margin=margin,
        clear_duration_s=clear_duration,
        project=project,
        cluster=cluster,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    rule.subscriptions.set(subscriptions)
    change_record_create(
        actor=actor,
        action="alert_rule.create",
        obj=rule,
        after={"kind": kind, "threshold": threshold, "duration_s": duration, "clear_margin": margin},
    )
    return rule


@transaction.atomic
def alert_rule_delete(*, actor, rule: AlertRule) -> None:
    require_staff(actor, message=_("Only platform staff manage alert rules."))
    change_record_create(actor=actor, action="alert_rule.delete", obj=rule)
    rule.delete()


# ---------------------------------------------------------------------------- what a measurement gives


@dataclass
class Observation:
    subject: str
    label: str
    value: float | None  # None: unknown (no fresh measurement)
    params: dict[str, Any] = field(default_factory=dict)
    project: Project | None = None


# ---------------------------------------------------------------------------- evaluation


def _shown(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _text(template: str, rule: AlertRule, obs: Observation, alert: Alert, now: datetime) -> str:
    held = (now - alert.since).total_seconds() if alert.since else 0
    params = {
        "threshold": _shown(rule.threshold),
        "value": _shown(obs.value) if obs.value is not None else "?",
        "minutes": int(held // 60),
        **obs.params,
    }
    if rule.kind == Kind.DEVICE_ERRORS:
        params["value"] = str(int(obs.value or 0))
    if rule.kind == Kind.CARD_SILENT:
        params["value"] = str(int(obs.value or 0))
    if rule.kind == Kind.CLUSTER_UNREACHABLE:
        params["value"] = str(int(obs.value or 0))
    try:
        return (template % params)[:500]
    except (KeyError, TypeError, ValueError):
        return template[:500]


def _notify(rule: AlertRule, alert: Alert, event: str, text: str, now: datetime) -> int:
    from apps.notify.services import LANGUAGES, SEND_TASK

    subs = [s for s in rule.subscriptions.filter(active=True) if event in (s.events or [])]
    if not subs:
        return 0
    rendered = {}
    for language in LANGUAGES:
        with translation.override(language):
            rendered[language] = _(NOTIFICATION) % {"rule": rule.name, "text": localize(text)}
    payload = {
        "event": event,
        "occurred_at": now.isoformat(),
        "project": alert.project.slug if alert.project else None,
        "message": rendered["en"],
        "message_zh_hans": rendered["zh-hans"],
        "link": "/notifications/alerts/",
        "data": {
            "rule": rule.pk,
            "kind": rule.kind,
            "alert": alert.pk,
            "subject": alert.subject,
            "value": alert.value,
            "threshold": rule.threshold,
        },
    }
    made = 0
    for sub in subs:
        try:
            with transaction.atomic():
                Delivery.objects.create(
                    subscription=sub,
                    event=event,
                    key=f"alert:{alert.pk}:{event}",
                    payload=payload,
                    next_attempt_at=now,
                )
        except IntegrityError:
            continue
        made += 1
    if made:
        enqueue_on_commit(SEND_TASK)
    return made


def _fire(rule, alert, obs, now, counts) -> None:
    alert.state = Alert.State.FIRING
    alert.fired_at = now
    alert.message = _text(KINDS[rule.kind].firing, rule, obs, alert, now)
    alert.save()
    counts["fired"] += 1
    counts["deliveries"] += _notify(rule, alert, Event.ALERT_FIRING, alert.message, now)


def _resolve(rule, alert, text, now, counts) -> None:
    alert.state = Alert.State.RESOLVED
    alert.resolved_at = now
    alert.resolved_message = text
    alert.save()
    counts["resolved"] += 1
    counts["deliveries"] += _notify(rule, alert, Event.ALERT_RESOLVED, text, now)


def rule_evaluate(
    rule: AlertRule, observations: list[Observation], *, now: datetime, counts: dict[str, int]
) -> None:
    """One evaluation of one rule from its subjects' ``observations`` (measured by
    ``apps.telemetry.alerts``), inside a transaction holding the rule's row lock."""
    spec = KINDS[rule.kind]
    hold = timedelta(seconds=rule.duration_s if spec.hold else 0)
    clear_for = timedelta(seconds=rule.clear_duration_s)
    open_alerts = {
        a.subject: a
        for a in Alert.objects.select_for_update(of=("self",))
        .filter(rule=rule, state__in=[Alert.State.PENDING, Alert.State.FIRING])
        .select_related("project")
    }
    for obs in observations:
        alert = open_alerts.pop(obs.subject, None)
        if obs.value is None:
            counts["unknown"] += 1
            continue  # no fresh measurement: the alert keeps its state
        bad = spec.bad(obs.value, rule.threshold)
        if alert is None:
            if not bad:
                continue
            alert = Alert.objects.create(
                rule=rule,
                subject=obs.subject,
                subject_label=obs.label[:200],
                project=obs.project,
                state=Alert.State.PENDING,
                since=now,
                value=obs.value,
                evaluated_at=now,
            )
            if hold.total_seconds() == 0:
                _fire(rule, alert, obs, now, counts)
            continue
        alert.value, alert.evaluated_at = obs.value, now
        if alert.state == Alert.State.PENDING:
            if not bad:
                alert.delete()  # it did not hold for the duration: it never was an alert
                continue
            if now - alert.since >= hold:
                _fire(rule, alert, obs, now, counts)
            else:
                alert.save(update_fields=["value", "evaluated_at"])
            continue
        # firing
        if spec.cleared(obs.value, rule.threshold, rule.clear_margin):
            alert.clear_since = alert.clear_since or now
            if now - alert.clear_since >= clear_for:
                _resolve(rule, alert, _text(spec.resolved, rule, obs, alert, now), now, counts)
                continue
        else:
            alert.clear_since = None
        alert.save(update_fields=["value", "evaluated_at", "clear_since"])
    for alert in open_alerts.values():  # subjects that left the rule
        if alert.state == Alert.State.PENDING:
            alert.delete()
        else:
            _resolve(rule, alert, SUBJECT_GONE % {"subject": alert.subject_label}, now, counts)
