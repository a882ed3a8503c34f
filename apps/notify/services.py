"""Notifications: subscriptions, the delivery outbox and the sender.

``notify()`` runs inside the transaction that made the event and only writes ``Delivery`` rows (one per
matching subscription, unique per event key, so a repeated event is a no-op); a send task is queued
after commit. The sender claims due deliveries with a conditional update (a lease: a crashed sender's
claim expires), sends **outside any transaction**, and records the outcome; failures retry with
exponential backoff up to ``MAX_ATTEMPTS``. Delivery is therefore at least once; receivers dedupe on
``X-Suanchi-Delivery``.

Webhook requests are ``POST`` JSON with::

    X-Suanchi-Event: job.failed
    X-Suanchi-Delivery: <delivery id>
    X-Suanchi-Timestamp: <unix seconds>
    X-Suanchi-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the subscription secret>

The timestamp is inside the signed text, so a receiver can refuse replays older than a few minutes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.mail import send_mail
from django.core.validators import EmailValidator
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from apps.accounts.models import Membership, Project, UserPreference
from apps.accounts.selectors import is_platform_staff, user_role
from apps.core import outbound, task_names
from apps.core.audit import change_record_create
from apps.core.conf import suanchi_setting
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.core.stored_text import stored
from apps.core.tasks import enqueue_on_commit
from apps.notify import robots
from apps.notify.models import Delivery, Event, Subscription

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 8
BACKOFF_S = 30  # 30 s, 1 min, 2 min, … capped at an hour
BACKOFF_CAP_S = 3600
LEASE_S = 120  # a claimed delivery not finished by then is claimed again
TIMEOUT_S = 5
SEND_TASK = task_names.DELIVERIES_SEND
LANGUAGES = ("en", "zh-hans")


def _check_url(url: str) -> str:
    """http(s) only, and the host must pass the outbound address policy (apps/core/outbound.py) now:
    a project admin must not make the worker call the platform's own internals, the cloud metadata
    service or the private network. The sender checks again at connect time."""
    try:
        outbound.check_url(url)
    except outbound.BadURL:
        raise ValidationFailed(
            _("A webhook URL starts with http:// or https:// and names a host."),
            details={"target": ["invalid URL"]},
        ) from None
    except outbound.AddressRefused as exc:
        raise ValidationFailed(
            _("Webhooks to %(host)s are not allowed: %(reason)s")
            % {"host": exc.host[:100], "reason": exc.describe()},
            details={"target": ["unresolvable" if exc.kind == "unresolvable" else "address not allowed"]},
        ) from None
    return url


def _may_manage(user, project: Project | None) -> None:
    if project is None:
        return
    if is_platform_staff(user):
        return
    if user_role(user, project) != Membership.Role.ADMIN:
        raise PermissionDenied(
            _("Only admins of project %(project)s manage its notifications.") % {"project": project.slug}
        )


ROBOT_NAMES = {
    robots.DINGTALK: "DingTalk",
    robots.WECOM: "WeCom",
    robots.FEISHU: "Feishu",
}


def _robot_secret(channel: str, secret: str) -> str:
    secret = (secret or "").strip()
    if channel == robots.WECOM and secret:
        raise ValidationFailed(
            _("WeCom group robots are not signed: the key in the webhook URL is their credential."),
            details={"secret": ["not used by WeCom"]},
        )
    if len(secret) > 200:
        raise ValidationFailed(
            _("The signing secret is longer than 200 characters."), details={"secret": ["too long"]}
        )
    if channel == robots.DINGTALK and secret and not secret.startswith("SEC"):
        raise ValidationFailed(
            _(
                "A DingTalk signing secret starts with SEC: copy it from “Sign request” (加签) in the "
                "robot's security settings."
            ),
            details={"secret": ["not a DingTalk secret"]},
        )
    return secret


@transaction.atomic
def subscription_create(
    *,
    actor,
    channel: str,
    target: str,
    events: list[str],
    project: Project | None = None,
    secret: str = "",
    language: str = "",
) -> Subscription:
    _may_manage(actor, project)
    if channel not in Subscription.Channel.values:
        raise ValidationFailed(
            _("Choose webhook, e-mail, DingTalk, WeCom or Feishu."), details={"channel": ["unknown"]}
        )
    if language and language not in dict(settings.LANGUAGES):
        raise ValidationFailed(
            _("Choose a language of the platform or leave it blank."), details={"language": ["unknown"]}
        )
    target = (target or "").strip()
    if channel == Subscription.Channel.WEBHOOK:
        _check_url(target)
    elif channel in Subscription.ROBOTS:
        missing = robots.target_problem(channel, target)  # the shape first: it needs no DNS
        if missing:
            raise ValidationFailed(
                _("This is not a %(robot)s robot webhook address: it has no %(part)s.")
                % {"robot": ROBOT_NAMES[channel], "part": missing},
                details={"target": ["not a robot webhook address"]},
            )
        secret = _robot_secret(channel, secret)
        _check_url(target)
    else:
        try:
            EmailValidator()(target)
        except DjangoValidationError:
            raise ValidationFailed(
                _("%(target)s is not an e-mail address.") % {"target": target[:100]},
                details={"target": ["invalid"]},
            )
    events = sorted(set(events or []))
    unknown = [e for e in events if e not in Event.values]
    if not events or unknown:
        raise ValidationFailed(
            _("Choose at least one known event (%(known)s).") % {"known": ", ".join(Event.values)},
            details={"events": unknown or ["none chosen"]},
        )
    if len(target) > 500:
        raise ValidationFailed(
            _("The target is longer than 500 characters."), details={"target": ["too long"]}
        )
    sub = Subscription.objects.create(
        owner=actor,
        project=project,
        channel=channel,
        target=target,
        events=events,
        secret=(
            Subscription.new_secret()
            if channel == Subscription.Channel.WEBHOOK
            else secret
            if channel in Subscription.ROBOTS
            else ""
        ),
        language=language,
    )
    change_record_create(
        actor=actor, action="subscription.create", obj=sub, after={"channel": channel, "events": events}
    )
    return sub


@transaction.atomic
def subscription_delete(*, actor, subscription: Subscription) -> None:
    if subscription.owner_id != actor.pk:
        _may_manage(actor, subscription.project)
        if subscription.project is None and not is_platform_staff(actor):
            raise PermissionDenied(_("This is someone else's subscription."))
    change_record_create(actor=actor, action="subscription.delete", obj=subscription)
    subscription.delete()


# ---------------------------------------------------------------------------- events → deliveries


def _render(message: str, params: dict) -> dict[str, str]:
    """The message in every platform language (texts are msgids with %(name)s parameters)."""
    out = {}
    for language in LANGUAGES:
        with translation.override(language):
            try:
                out[language] = _(message) % params
            except (KeyError, TypeError, ValueError):
                out[language] = _(message)
    return out


def _recipients(*, project: Project | None, users, staff: bool) -> list[Subscription]:
    user_ids = {u.pk for u in users if u is not None and getattr(u, "pk", None)}
    subs = list(Subscription.objects.filter(active=True).select_related("owner", "project"))
    out = []
    for sub in subs:
        if sub.project_id is not None:
            if project is not None and sub.project_id == project.pk:
                out.append(sub)
            continue
        owner = sub.owner
        if not owner.is_active:
            continue
        if staff and is_platform_staff(owner):
            out.append(sub)
        elif owner.pk in user_ids and (
            project is None or is_platform_staff(owner) or user_role(owner, project)
        ):
            out.append(sub)  # a personal subscription hears only about projects its owner still sees
    return out


def notify(
    event: str,
    *,
    key: str,
    message: str,
    params: dict[str, Any],
    project: Project | None = None,
    users=(),
    staff: bool = False,
    link: str = "",
    data: dict | None = None,
) -> int:
    """Queue ``event`` for every matching subscription (inside the caller's transaction). Returns how
    many deliveries were written; an event already queued under ``key`` writes nothing again."""
    subs = [s for s in _recipients(project=project, users=users, staff=staff) if event in (s.events or [])]
    if not subs:
        return 0
    now = timezone.now()
    texts = _render(message, params)
    payload = {
        "event": event,
        "occurred_at": now.isoformat(),
        "project": project.slug if project else None,
        "message": texts["en"],
        "message_zh_hans": texts["zh-hans"],
        "link": link,
        "data": data or {},
    }
    made = 0
    for sub in subs:
        try:
            with transaction.atomic():
                Delivery.objects.create(
                    subscription=sub, event=event, key=key[:200], payload=payload, next_attempt_at=now
                )
        except IntegrityError:
            continue  # the same event again: delivered once
        made += 1
    if made:
        enqueue_on_commit(SEND_TASK)
    return made


# ---------------------------------------------------------------------------- sending


def _backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_CAP_S, BACKOFF_S * 2 ** max(0, attempts - 1)))


def signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


# What the delivery log says about a webhook attempt: the outcome class only. No remote error text,
# no errno: a project admin must not learn from it which hosts and ports answer (port scanning).
REFUSED_BY_POLICY = stored("refused by the address policy")
REDIRECT_NOT_FOLLOWED = stored("failed: redirect not followed (HTTP 3xx)")
FAILED_HTTP = stored("failed: HTTP %(status_class)s")
FAILED_NO_RESPONSE = stored("failed: no HTTP response")


def _send_webhook(delivery: Delivery) -> tuple[bool, int | None, str]:
    """POST the signed payload under the outbound address policy. Returns (delivered, the HTTP status
    rounded to its class, the log text)."""
    sub = delivery.subscription
    body = json.dumps(
        {**delivery.payload, "delivery": delivery.pk}, sort_keys=True, separators=(",", ":")
    ).encode()
    stamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Suanchi-Webhook/1",
        "X-Suanchi-Event": delivery.event,
        "X-Suanchi-Delivery": str(delivery.pk),
        "X-Suanchi-Timestamp": stamp,
        "X-Suanchi-Signature": signature(sub.secret, stamp, body),
    }
    try:
        status = outbound.request("POST", sub.target, body=body, headers=headers, timeout=TIMEOUT_S)
    except (outbound.BadURL, outbound.AddressRefused) as exc:
        log.warning("notification %s refused by the outbound address policy: %r", delivery.pk, exc)
        return False, None, REFUSED_BY_POLICY
    except outbound.RequestFailed as exc:
        log.info("notification %s got no HTTP response: %s", delivery.pk, exc)  # operators only
        return False, None, FAILED_NO_RESPONSE
    status_class = status // 100
    if status_class == 2:
        return True, 200, ""
    if status_class == 3:
        return False, 300, REDIRECT_NOT_FOLLOWED
    return (
        False,
        status_class * 100 if 1 <= status_class <= 5 else None,
        FAILED_HTTP % {"status_class": f"{status_class}xx"},
    )


def subscriber_language(sub: Subscription) -> str:
    """The language a subscription's messages are written in: its own, else its owner's preference,
    else the platform's."""
    if sub.language:
        return sub.language
    preferred = UserPreference.objects.filter(user_id=sub.owner_id).values_list("language", flat=True).first()
    return preferred or settings.LANGUAGE_CODE


def message_in(payload: dict, language: str) -> str:
    """The payload's message in ``language`` (every message is rendered in each platform language)."""
    if language.startswith("zh"):
        return payload.get("message_zh_hans") or payload.get("message") or ""
    return payload.get("message") or ""


ROBOT_REFUSED = stored("failed: the robot refused the message (error code %(code)s)")


def _send_robot(delivery: Delivery) -> tuple[bool, int | None, str]:
    """Post to a DingTalk / WeCom / Feishu group robot (apps/notify/robots.py), signed as its vendor
    documents, in the subscriber's language, under the outbound address policy. The robots answer
    HTTP 200 also when they refuse a message; their JSON error code decides."""
    sub = delivery.subscription
    payload = delivery.payload
    language = subscriber_language(sub)
    with translation.override(language):
        title = _("[Suanchi] %(event)s") % {"event": Event(delivery.event).label}
    text = message_in(payload, language)
    base = (suanchi_setting("PUBLIC_URL", None) or "").rstrip("/")
    if base and payload.get("link"):
        text = f"{text}\n{base}{payload['link']}"
    url, body = robots.build(sub.channel, sub.target, sub.secret, title=title, text=text, now=time.time())
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "Suanchi-Webhook/1"}
    try:
        status, answer = outbound.request_json("POST", url, body=body, headers=headers, timeout=TIMEOUT_S)
    except (outbound.BadURL, outbound.AddressRefused) as exc:
        log.warning("notification %s refused by the outbound address policy: %r", delivery.pk, exc)
        return False, None, REFUSED_BY_POLICY
    except outbound.RequestFailed as exc:
        log.info("notification %s got no HTTP response: %s", delivery.pk, exc)
        return False, None, FAILED_NO_RESPONSE
    status_class = status // 100
    if status_class == 3:
        return False, 300, REDIRECT_NOT_FOLLOWED
    if status_class != 2:
        return (
            False,
            status_class * 100 if 1 <= status_class <= 5 else None,
            FAILED_HTTP % {"status_class": f"{status_class}xx"},
        )
    code = robots.refusal_code(sub.channel, answer)
    if code is not None:
        return False, 200, ROBOT_REFUSED % {"code": code}
    return True, 200, ""


def _send_email(delivery: Delivery) -> tuple[bool, int | None, str]:
    payload = delivery.payload
    language = subscriber_language(delivery.subscription)
    text = payload.get("message_zh_hans") if language.startswith("zh") else payload.get("message")
    with translation.override(language):
        subject = _("[Suanchi] %(event)s") % {"event": Event(delivery.event).label}
    body = "\n\n".join(
        part for part in (payload.get("message"), payload.get("message_zh_hans"), payload.get("link")) if part
    )
    if text and text != payload.get("message"):
        body = text + "\n\n" + body
    try:
        send_mail(subject, body, None, [delivery.subscription.target], fail_silently=False)
    except Exception as exc:  # noqa: BLE001 - any mail backend error is a failed attempt, retried
        return False, None, str(exc)[:500]
    return True, None, ""


def deliveries_send(*, limit: int = 100, now=None) -> dict[str, int]:
    """Send due deliveries (never inside a transaction). Returns {"delivered", "retrying", "failed"}."""
    if transaction.get_connection().in_atomic_block:
        raise RuntimeError("deliveries are sent outside transactions")
    now = now or timezone.now()
    counts = {"delivered": 0, "retrying": 0, "failed": 0}
    due = list(
        Delivery.objects.filter(state=Delivery.State.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    for pk in due:
        claimed = Delivery.objects.filter(
            pk=pk, state=Delivery.State.PENDING, next_attempt_at__lte=now
        ).update(attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=LEASE_S))
        if not claimed:
            continue  # another sender has it
        delivery = Delivery.objects.select_related("subscription").get(pk=pk)
        channel = delivery.subscription.channel
        sender = (
            _send_webhook
            if channel == Subscription.Channel.WEBHOOK
            else _send_robot
            if channel in Subscription.ROBOTS
            else _send_email
        )
        ok, status, error = sender(delivery)
        fields = {"response_status": status, "last_error": error}
        if ok:
            fields.update(state=Delivery.State.DELIVERED, delivered_at=timezone.now(), last_error="")
            counts["delivered"] += 1
        elif delivery.attempts >= MAX_ATTEMPTS:
            fields.update(state=Delivery.State.FAILED)
            counts["failed"] += 1
            log.warning("notification %s failed for good after %s attempts: %s", pk, delivery.attempts, error)
        else:
            fields.update(next_attempt_at=timezone.now() + _backoff(delivery.attempts))
            counts["retrying"] += 1
        Delivery.objects.filter(pk=pk).update(**fields)
    return counts
