"""Staff change a node's state from its page (issue 21): maintenance on/off, cordon/uncordon,
quarantine/release, each with a required reason, through the ledger services; members see no buttons
and a member's POST is a styled 403."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.inventory.models import Device, DeviceEvent, Node
from tests.inventory.test_pages import make_cluster, make_device, make_node, make_project, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def node_world(db):
    project = make_project("alpha")
    node = make_node(make_cluster("bj1"), "gpu-ops-01")
    cards = [make_device(node, i) for i in range(2)]
    return {
        "node": node,
        "cards": cards,
        "staff": make_user("ops", staff=True),
        "member": make_user("alice", projects=[project]),
    }


def _post(client, node, action, reason="firmware upgrade"):
    return client.post(reverse("inventory:node-action", args=[node.pk]), {"action": action, "reason": reason})


def test_staff_see_the_actions_labelled_staff_only_and_members_do_not(client, node_world):
    url = reverse("inventory:node-detail", args=[node_world["node"].pk])
    client.force_login(node_world["staff"])
    html = client.get(url).content.decode()
    assert 'id="node-actions"' in html and "Platform staff only" in html
    for action in ("maintenance_on", "cordon", "quarantine"):
        assert f'data-node-action="{action}"' in html
    assert 'data-node-action="release"' not in html  # not quarantined: nothing to release
    assert html.count('name="reason" type="text" required') == html.count("data-node-action=")

    client.force_login(node_world["member"])
    html = client.get(url).content.decode()
    assert 'id="node-actions"' not in html and "data-node-action" not in html


def test_a_member_post_is_a_styled_403_and_changes_nothing(client, node_world):
    client.force_login(node_world["member"])
    response = _post(client, node_world["node"], "quarantine")
    assert response.status_code == 403
    html = response.content.decode()
    assert 'data-error-page="403"' in html and "platform staff only" in html
    node_world["node"].refresh_from_db()
    assert node_world["node"].status == Node.Status.READY
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.QUARANTINE).exists()


def test_every_action_needs_a_reason(client, node_world):
    client.force_login(node_world["staff"])
    response = _post(client, node_world["node"], "maintenance_on", reason="   ")
    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    node_world["node"].refresh_from_db()
    assert node_world["node"].status == Node.Status.READY
    assert _post(client, node_world["node"], "reboot").status_code == 400  # unknown action


def test_maintenance_quarantine_and_release_go_through_the_ledger_with_the_reason(client, node_world):
    node = node_world["node"]
    client.force_login(node_world["staff"])
    response = _post(client, node, "maintenance_on", reason="BIOS update")
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.status == Node.Status.MAINTENANCE and node.status_reason == "BIOS update"
    event = DeviceEvent.objects.filter(node=node, kind=DeviceEvent.Kind.MAINTENANCE).latest("pk")
    assert "BIOS update" in event.message and event.actor_label

    assert _post(client, node, "maintenance_off", reason="done").status_code == 302
    node.refresh_from_db()
    assert node.status == Node.Status.READY

    assert _post(client, node, "quarantine", reason="XID 79").status_code == 302
    node.refresh_from_db()
    assert node.status == Node.Status.QUARANTINED
    assert any(t.get("key") == "suanchi.io/quarantine" for t in node.taints)
    html = client.get(reverse("inventory:node-detail", args=[node.pk])).content.decode()
    assert 'data-node-action="release"' in html and 'data-node-action="maintenance_on"' not in html

    assert _post(client, node, "release", reason="card replaced").status_code == 302
    node.refresh_from_db()
    assert node.status == Node.Status.READY


def test_a_move_the_state_machine_refuses_is_a_409_with_the_reason(client, node_world):
    node = node_world["node"]
    client.force_login(node_world["staff"])
    response = _post(client, node, "release", reason="nothing to release")
    assert response.status_code == 409
    assert "data-action-error" in response.content.decode()
    _post(client, node, "quarantine", reason="XID 79")
    response = _post(client, node, "maintenance_on", reason="cannot from quarantine")
    assert response.status_code == 409
    node.refresh_from_db()
    assert node.status == Node.Status.QUARANTINED


def test_cordon_and_uncordon_every_card_of_the_node(client, node_world):
    node = node_world["node"]
    client.force_login(node_world["staff"])
    assert _post(client, node, "cordon", reason="flaky fan").status_code == 302
    cards = Device.objects.filter(node=node)
    assert all(c.cordoned and c.cordon_reason == "flaky fan" for c in cards)
    assert DeviceEvent.objects.filter(node=node, kind=DeviceEvent.Kind.CORDON).count() == 2
    assert _post(client, node, "cordon", reason="again").status_code == 409  # nothing left to cordon
    assert _post(client, node, "uncordon", reason="fan replaced").status_code == 302
    assert not Device.objects.filter(node=node, cordoned=True).exists()


def test_the_admin_history_page_of_a_node_and_a_device_lists_their_ledger_events(client, node_world):
    node, card = node_world["node"], node_world["cards"][0]
    staff = node_world["staff"]
    staff.is_superuser = True  # the admin's view permission
    staff.save(update_fields=["is_superuser"])
    client.force_login(staff)
    _post(client, node, "cordon", reason="flaky fan")
    _post(client, node, "maintenance_on", reason="BIOS update")
    html = client.get(reverse("admin:inventory_node_history", args=[node.pk])).content.decode()
    assert 'id="ledger-history"' in html
    assert "BIOS update" in html and "flaky fan" in html
    assert html.count("data-ledger-event=") == DeviceEvent.objects.filter(node=node).count() >= 3
    html = client.get(reverse("admin:inventory_device_history", args=[card.pk])).content.decode()
    assert html.count("data-ledger-event=") == DeviceEvent.objects.filter(device=card).count() == 1
    assert "flaky fan" in html and "BIOS update" not in html
