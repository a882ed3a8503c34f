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
import ipaddress
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.mail import send_mail
from django.core.validators import EmailValidator
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from apps.accounts.models import Membership, Project
from apps.accounts.selectors import is_platform_staff, user_role
from apps.core.audit import change_record_create
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.core.tasks import enqueue_on_commit
from apps.notify.models import Delivery, Event, Subscription

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 8
BACKOFF_S = 30  # 30 s, 1 min, 2 min, … capped at an hour
BACKOFF_CAP_S = 3600
LEASE_S = 120  # a claimed delivery not finished by then is claimed again
TIMEOUT_S = 5
SEND_TASK = "worker.tasks.notify.deliveries_send_task"
LANGUAGES = ("en", "zh-hans")


def _allow_private() -> bool:
    return bool(settings.SUANCHI.get("NOTIFY_ALLOW_LOOPBACK_WEBHOOKS", False))


def _check_url(url: str) -> str:
    """http(s) only; loopback and link-local (cloud metadata) hosts refused unless the deployment
    allows them (``SUANCHI['NOTIFY_ALLOW_LOOPBACK_WEBHOOKS']``; the demo and tests do) — a project
    admin must not make the worker call the platform's own internals."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationFailed(
            _("A webhook URL starts with http:// or https:// and names a host."),
            details={"target": ["invalid URL"]},
        )
    if not _allow_private():
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
        except OSError:
            infos = []
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if address.is_loopback or address.is_link_local or address.is_unspecified:
                raise ValidationFailed(
                    _("Webhooks to %(host)s are not allowed: it is a loopback or link-local address.")
                    % {"host": parts.hostname},
                    details={"target": ["address not allowed"]},
                )
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


@transaction.atomic
def subscription_create(
    *, actor, channel: str, target: str, events: list[str], project: Project | None = None
) -> Subscription:
    _may_manage(actor, project)
    if channel not in Subscription.Channel.values:
        raise ValidationFailed(_("Choose webhook or e-mail."), details={"channel": ["unknown"]})
    target = (target or "").strip()
    if channel == Subscription.Channel.WEBHOOK:
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
        secret=Subscription.new_secret() if channel == Subscription.Channel.WEBHOOK else "",
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


def _send_webhook(delivery: Delivery) -> tuple[bool, int | None, str]:
    sub = delivery.subscription
    body = json.dumps(
        {**delivery.payload, "delivery": delivery.pk}, sort_keys=True, separators=(",", ":")
    ).encode()
    stamp = str(int(time.time()))
    request = urllib.request.Request(  # noqa: S310 - _check_url allows http(s) only
        _check_url(sub.target),
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Suanchi-Webhook/1",
            "X-Suanchi-Event": delivery.event,
            "X-Suanchi-Delivery": str(delivery.pk),
            "X-Suanchi-Timestamp": stamp,
            "X-Suanchi-Signature": signature(sub.secret, stamp, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 - http(s) checked
            return 200 <= response.status < 300, response.status, ""
    except urllib.error.HTTPError as exc:
        return False, exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, None, str(getattr(exc, "reason", exc))[:500]


def _send_email(delivery: Delivery) -> tuple[bool, int | None, str]:
    payload = delivery.payload
    language = settings.LANGUAGE_CODE
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
        sender = (
            _send_webhook if delivery.subscription.channel == Subscription.Channel.WEBHOOK else _send_email
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
