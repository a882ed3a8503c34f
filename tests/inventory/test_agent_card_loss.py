"""Issue 27 §4: an unbound agent token may not report cards lost (掉卡) on a node it did not register.

The demo shipped an agent token with no node pattern; with it an empty report for ``dev-ws-01``
marked that node's card lost. Now the demo's token is bound to one node, and an unbound token
(no pattern, or only "*") still registers new nodes (pending approval) and updates the nodes it
reports for, but a report that would mark cards lost on a node someone else registered (staff, a
ledger import, cluster sync, another token) is a 403 and writes nothing. The rules of
tests/inventory/test_agent_scope.py stay as they were.
"""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from apps.inventory.models import AgentToken, Cluster, Device, DeviceEvent, Node, NodeReport
from apps.inventory.services.discovery import node_report_ingest
from apps.inventory.services.tokens import agent_token_create
from tests.inventory.test_agent_scope import T4_CSV_HEADER, agent_client, post, t4_csv

pytestmark = pytest.mark.django_db

CARD = "GPU-11111111-2222-4333-8444-555555555555"
EMPTY_REPORT = T4_CSV_HEADER  # nvidia-smi found no card at all


@pytest.fixture
def cluster():
    return Cluster.objects.create(name="Lab", slug="lab")


@pytest.fixture
def staff_node(cluster, staff_user):
    node_report_ingest(
        node_name="ws-01", kind="nvidia-smi-csv", text=t4_csv((0, CARD)), actor=staff_user, cluster=cluster
    )
    return Node.objects.get(name="ws-01")


@pytest.mark.parametrize("pattern", ["", "*"])
def test_an_unbound_token_may_not_mark_cards_lost_on_a_node_it_did_not_register(
    api_client, cluster, staff_node, pattern
):
    events, reports = DeviceEvent.objects.count(), NodeReport.objects.count()
    client = agent_client(api_client, cluster, node_pattern=pattern)

    response = post(client, "ws-01", EMPTY_REPORT)

    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "agent_may_not_mark_lost"
    assert "bound to no node" in error["message"] and "Nothing was written" in error["message"]
    assert error["details"] == {"node": "ws-01", "would_mark_lost": [0]}
    assert Device.objects.get(uuid=CARD).health == Device.Health.HEALTHY
    assert (DeviceEvent.objects.count(), NodeReport.objects.count()) == (events, reports)
    assert Node.objects.get(pk=staff_node.pk).last_report_at == staff_node.last_report_at


def test_an_unbound_token_still_reports_a_full_inventory_for_that_node(api_client, cluster, staff_node):
    client = agent_client(api_client, cluster)
    response = post(client, "ws-01", t4_csv((0, CARD)))
    assert response.status_code == 201, response.content
    assert response.json()["result"]["lost"] == 0
    assert NodeReport.objects.get(node=staff_node).repeat_count == 2  # the same text again, counted


def test_an_unbound_token_registers_a_node_and_may_report_its_own_cards_lost(api_client, cluster):
    client = agent_client(api_client, cluster)
    registered = post(client, "ws-new", t4_csv((0, CARD)))
    assert registered.status_code == 201, registered.content
    node = Node.objects.get(name="ws-new")
    assert node.pending_approval and node.registered_by_token == AgentToken.objects.get()

    lost = post(client, "ws-new", EMPTY_REPORT)

    assert lost.status_code == 201, lost.content
    assert lost.json()["result"]["lost"] == 1
    assert Device.objects.get(uuid=CARD).health == Device.Health.LOST


def test_another_unbound_token_may_not_mark_lost_what_the_first_registered(api_client, cluster):
    post(agent_client(api_client, cluster), "ws-new", t4_csv((0, CARD)))
    second = agent_client(api_client, cluster)
    assert post(second, "ws-new", EMPTY_REPORT).status_code == 403
    assert Device.objects.get(uuid=CARD).health == Device.Health.HEALTHY


def test_a_token_bound_to_the_node_still_reports_its_card_lost(api_client, cluster, staff_node):
    client = agent_client(api_client, cluster, node_pattern="ws-01")
    response = post(client, "ws-01", EMPTY_REPORT)
    assert response.status_code == 201, response.content
    assert response.json()["result"]["lost"] == 1
    assert Device.objects.get(uuid=CARD).health == Device.Health.LOST


def test_staff_still_report_a_card_lost(cluster, staff_node, staff_user):
    result = node_report_ingest(node_name="ws-01", kind="nvidia-smi-csv", text=EMPTY_REPORT, actor=staff_user)
    assert result.lost == 1


def test_the_demo_binds_its_agent_token_to_a_node_and_its_key_cannot_lose_dev_ws_01(api_client, capsys):
    call_command("load_demo")
    out = capsys.readouterr().out
    key = re.search(r"node agent token for (\S+) \(shown once\): (sca_\S+)", out)
    assert key is not None, out
    assert not AgentToken.objects.filter(node_pattern="").exists()
    assert set(AgentToken.objects.values_list("node_pattern", flat=True)) == {key.group(1)}
    card = Device.objects.get(node__name="dev-ws-01")
    health = card.health

    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key.group(2)}")
    response = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "dev-ws-01", "kind": "nvidia-smi-csv", "text": EMPTY_REPORT},
        format="json",
    )

    assert response.status_code == 403, response.content
    assert Device.objects.get(pk=card.pk).health == health != Device.Health.LOST


def test_an_unbound_token_made_before_the_binding_rule_is_restricted_too(api_client, cluster, staff_node):
    # Tokens made before bindings existed have no pattern, and nodes registered before this rule
    # have no registering token: the restriction applies to them without a data migration.
    _token, key = agent_token_create(cluster=cluster, name="old agent", actor="test")
    Node.objects.filter(pk=staff_node.pk).update(registered_by_token=None)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert post(api_client, "ws-01", EMPTY_REPORT).status_code == 403
