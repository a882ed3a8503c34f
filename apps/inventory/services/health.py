"""Node liveness from the agent's reports."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.core.audit import actor_fields
from apps.core.conf import suanchi_setting
from apps.core.stored_text import stored
from apps.inventory.models import DeviceEvent, Node
from apps.inventory.services.ledger.events import device_event_create

# Shown in the reader's language (apps.core.stored_text).
REPORT_OVERDUE = stored("no node report since %(since)s; is the agent running?")


def node_staleness_check(*, actor, now=None) -> dict:
    """Nodes that reported before but not within the stale window get one "reports overdue" event.

    The flag is a conditional update, so two workers running the check at once flag a node once.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=suanchi_setting("NODE_REPORT_STALE_MINUTES"))
    label = actor_fields(actor)["actor_label"]
    flagged = 0
    candidates = Node.objects.filter(last_report_at__lt=cutoff, report_overdue_since__isnull=True).exclude(
        status=Node.Status.RETIRED
    )
    for node in candidates.only("pk", "name", "last_report_at"):
        with transaction.atomic():
            won = Node.objects.filter(pk=node.pk, report_overdue_since__isnull=True).update(
                report_overdue_since=now
            )
            if not won:
                continue
            device_event_create(
                node=node,
                kind=DeviceEvent.Kind.REPORT_OVERDUE,
                severity=DeviceEvent.Severity.WARNING,
                message=REPORT_OVERDUE % {"since": f"{node.last_report_at:%Y-%m-%d %H:%M %Z}"},
                actor_label=label,
            )
            flagged += 1
    return {"flagged": flagged}
