"""The one writer of ledger events raises the NODE_QUARANTINED notification (issue 30): a node's
quarantine notifies staff, one event or many written at once, and a release from quarantine does not."""

from __future__ import annotations

from unittest import mock

import pytest

from apps.inventory.models import DeviceEvent, Node
from apps.inventory.services.ledger import events, node_status_set
from apps.notify.models import Event

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(cluster):
    return Node.objects.create(cluster=cluster, name="gpu-q1")


def test_quarantining_a_node_notifies_staff_once(node):
    with mock.patch.object(events, "notify") as notify:
        node_status_set(node=node, status=Node.Status.QUARANTINED, reason="PSU alarm", actor="ops")
    (call,) = notify.call_args_list
    assert call.args == (Event.NODE_QUARANTINED,)
    assert call.kwargs["staff"] is True
    assert call.kwargs["params"] == {"node": "gpu-q1", "reason": "node gpu-q1 quarantined: PSU alarm"}
    event = node.events.get(kind=DeviceEvent.Kind.QUARANTINE)
    assert call.kwargs["key"] == f"node:{node.pk}:quarantine:{event.pk}"


def test_a_release_from_quarantine_notifies_nobody(node):
    node_status_set(node=node, status=Node.Status.QUARANTINED, reason="PSU alarm", actor="ops")
    with mock.patch.object(events, "notify") as notify:
        node_status_set(node=node, status=Node.Status.READY, reason="PSU replaced", actor="ops")
    assert not notify.called


def test_quarantine_events_written_in_bulk_notify_each(cluster):
    nodes = [
        Node.objects.create(cluster=cluster, name=f"gpu-b{i}", status=Node.Status.QUARANTINED) for i in (1, 2)
    ]
    written = [DeviceEvent(node=n, kind=DeviceEvent.Kind.QUARANTINE, message="fault") for n in nodes]
    with mock.patch.object(events, "notify") as notify:
        events.device_events_create(written)
    assert sorted(c.kwargs["params"]["node"] for c in notify.call_args_list) == ["gpu-b1", "gpu-b2"]
    assert all(e.pk for e in written)
