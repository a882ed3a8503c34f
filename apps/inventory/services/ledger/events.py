"""The one writer of ledger events (``DeviceEvent``), and the notification a node's quarantine raises.

Every ledger event is written here, one or many at a time (``device_events_create``), so an event
that warns someone cannot be written without its notification — a bulk write included. A node-level
quarantine event of a node that is quarantined (a release from quarantine is not an alarm) notifies
the platform staff and the projects whose jobs hold cards there (``Event.NODE_QUARANTINED``),
queued in the caller's transaction (``apps.notify.services.notify``).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.urls import reverse
from django.utils.translation import gettext_noop

from apps.accounts.models import Project
from apps.inventory.models import DeviceEvent, Node
from apps.notify.models import Event
from apps.notify.services import notify

NODE_QUARANTINED_MESSAGE = gettext_noop("Node %(node)s was quarantined: %(reason)s")


def device_events_create(events: Iterable[DeviceEvent]) -> list[DeviceEvent]:
    """Write ledger events (one ``bulk_create``) and raise the notifications they call for."""
    events = list(events)
    if not events:
        return events
    if len(events) == 1:
        events[0].save(force_insert=True)
    else:
        DeviceEvent.objects.bulk_create(events)
    quarantines = [e for e in events if e.kind == DeviceEvent.Kind.QUARANTINE and e.device_id is None]
    for event in quarantines:
        _node_quarantined_notify(event)
    return events


def device_event_create(**fields) -> DeviceEvent:
    """Write one ledger event (``DeviceEvent(**fields)``): see ``device_events_create``."""
    return device_events_create([DeviceEvent(**fields)])[0]


def _node_quarantined_notify(event: DeviceEvent) -> None:
    node = Node.objects.filter(pk=event.node_id).first()
    if node is None or node.status != Node.Status.QUARANTINED:
        return  # a release from quarantine is not an alarm
    projects = Project.objects.filter(
        jobs__allocations__node=node, jobs__allocations__released_at__isnull=True
    ).distinct()
    params = {"node": node.name, "reason": event.message[:300]}
    link = reverse("inventory:node-detail", kwargs={"pk": node.pk})
    key = f"node:{node.pk}:quarantine:{event.pk}"
    message = NODE_QUARANTINED_MESSAGE
    notify(Event.NODE_QUARANTINED, key=key, message=message, params=params, staff=True, link=link)
    for project in projects:  # the teams whose jobs ran there
        notify(Event.NODE_QUARANTINED, key=key, message=message, params=params, project=project, link=link)
