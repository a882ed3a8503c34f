"""What a node agent's token may do (issue 15, findings 1 and 2, and the rocm-smi part of 11).

* A report made with an agent token touches only its own cluster: a card the ledger has under
  another cluster is a CONFLICT event for staff, never a move.
* Agent tokens may be bound to a node or a node-name pattern; a report for any other node is a 403
  and writes nothing. Nodes an agent registers arrive pending approval and take no job until staff
  approve them (or a cluster sync confirms them). Node names are Kubernetes names (RFC 1123).
* A report whose vendor is not the node's, or that would register a card with no identity, is a 400.
"""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse

from apps.catalog.models import ComputeCoefficient, DeviceModel
from apps.core.errors import ValidationFailed
from apps.core.models import ChangeRecord
from apps.inventory.models import AgentToken, Cluster, Device, DeviceEvent, Node, NodeReport
from apps.inventory.services.discovery import node_approve, node_confirm_in_cluster, node_report_ingest
from apps.inventory.services.tokens import agent_token_create
from apps.jobs.models import Allocation
from apps.scheduling import services as scheduling
from apps.scheduling.snapshot import fleet_snapshot
from tests.fixtures.jobs import submit_whole_cards
from tests.inventory.test_discovery import gpu_csv, uuids

pytestmark = pytest.mark.django_db

EAST_CARD = "GPU-eeeeeeee-0000-4000-8000-0000000000e2"
T4_CSV_HEADER = "index, name, uuid, memory.total [MiB]\n"


def t4_csv(*rows: tuple[int, str]) -> str:
    return T4_CSV_HEADER + "".join(f"{i}, Tesla T4, {uuid}, 15360 MiB\n" for i, uuid in rows)


@pytest.fixture
def demo():
    return Cluster.objects.create(name="Demo", slug="demo")


@pytest.fixture
def east():
    cluster = Cluster.objects.create(name="East", slug="east")
    node = Node.objects.create(cluster=cluster, name="east-01")
    card = Device.objects.create(node=node, vendor="nvidia", index=0, uuid=EAST_CARD, memory_mib=15360)
    return {"cluster": cluster, "node": node, "card": card}


@pytest.fixture
def t4(db):
    model = DeviceModel.objects.create(
        vendor="nvidia",
        kind="gpu",
        name="T4",
        slug="t4",
        memory_mib=15360,
        product_names=["Tesla T4"],
        fp16_dense_tflops=65,
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("0.2000"), effective_from=date(2024, 1, 1)
    )
    return model


def agent_client(api_client, cluster, *, node_pattern: str = ""):
    _, key = agent_token_create(cluster=cluster, name="agent", node_pattern=node_pattern, actor="test")
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return api_client


def post(client, node: str, text: str, kind: str = "nvidia-smi-csv", **extra):
    return client.post(
        "/api/inventory/node-reports/", {"node": node, "kind": kind, "text": text, **extra}, format="json"
    )


# --------------------------------------------------------------------------------------------------
# finding 1: an agent token never moves a card out of another cluster


def test_an_agent_report_does_not_move_a_card_out_of_another_cluster(api_client, demo, east):
    client = agent_client(api_client, demo)
    response = post(client, "demo-thief-01", t4_csv((0, EAST_CARD)))

    assert response.status_code == 201, response.content
    result = response.json()["result"]
    assert result["moved"] == 0 and result["created"] == 0 and result["conflicts"] == 1
    assert any(EAST_CARD in w and "east" in w for w in response.json()["warnings"])
    card = Device.objects.get(uuid=EAST_CARD)
    assert card.node == east["node"] and card.health == Device.Health.HEALTHY
    thief = Node.objects.get(name="demo-thief-01")
    assert not thief.devices.exists()
    conflict = DeviceEvent.objects.get(kind=DeviceEvent.Kind.CONFLICT)
    assert conflict.device == card and conflict.node == thief
    assert conflict.severity == DeviceEvent.Severity.CRITICAL
    assert "east-01" in conflict.message and "not moved" in conflict.message
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.MOVED).exists()

    # The agent keeps reporting: the card stays put and staff get one event, not one per report.
    again = post(client, "demo-thief-01", t4_csv((0, EAST_CARD)))
    assert again.status_code == 201 and again.json()["result"]["conflicts"] == 1
    assert DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).count() == 1
    assert Device.objects.get(uuid=EAST_CARD).node == east["node"]


def test_staff_may_still_move_a_card_between_clusters(demo, east, staff_user):
    node_report_ingest(
        node_name="demo-01",
        kind="nvidia-smi-csv",
        text=t4_csv((0, EAST_CARD)),
        actor=staff_user,
        cluster=demo,
    )
    assert Device.objects.get(uuid=EAST_CARD).node.name == "demo-01"
    assert DeviceEvent.objects.filter(kind=DeviceEvent.Kind.MOVED).count() == 1


def test_a_bound_token_does_not_take_a_card_from_a_node_it_does_not_cover(api_client, demo, staff_user):
    node_report_ingest(
        node_name="gpu-b01", kind="nvidia-smi-csv", text=gpu_csv(uuids(1)), actor=staff_user, cluster=demo
    )
    node_report_ingest(
        node_name="gpu-a01",
        kind="nvidia-smi-csv",
        text=gpu_csv(uuids(1, "GPU-aaaa")),
        actor=staff_user,
        cluster=demo,
    )
    client = agent_client(api_client, demo, node_pattern="gpu-a*")
    response = post(client, "gpu-a01", gpu_csv(uuids(1)))  # gpu-b01's card, reported by gpu-a01
    assert response.status_code == 201, response.content
    assert response.json()["result"]["conflicts"] == 1 and response.json()["result"]["moved"] == 0
    assert Device.objects.get(uuid=uuids(1)[0][1]).node.name == "gpu-b01"


def test_a_card_does_not_move_onto_a_node_pending_approval(api_client, demo, staff_user):
    node_report_ingest(
        node_name="gpu-01", kind="nvidia-smi-csv", text=gpu_csv(uuids(1)), actor=staff_user, cluster=demo
    )
    client = agent_client(api_client, demo)
    response = post(client, "gpu-99", gpu_csv(uuids(1)))
    assert response.status_code == 201, response.content
    assert response.json()["node_pending_approval"] is True
    assert response.json()["result"]["conflicts"] == 1
    assert Device.objects.get(uuid=uuids(1)[0][1]).node.name == "gpu-01"


# --------------------------------------------------------------------------------------------------
# finding 2: tokens bound to nodes, new nodes pending approval, node names validated


def test_a_phantom_node_arrives_pending_and_takes_no_job_until_staff_approve_it(
    api_client, demo, t4, make_user, make_project, staff_user
):
    client = agent_client(api_client, demo)
    fakes = t4_csv(
        (0, "GPU-fa4e0000-0000-4000-8000-000000000001"), (1, "GPU-fa4e0000-0000-4000-8000-000000000002")
    )
    response = post(client, "phantom-01", fakes)
    assert response.status_code == 201, response.content
    phantom = Node.objects.get(name="phantom-01")
    assert phantom.pending_approval and not phantom.schedulable
    assert phantom.devices.count() == 2
    registered = DeviceEvent.objects.get(node=phantom, device=None, kind=DeviceEvent.Kind.REGISTERED)
    assert "pending approval" in registered.message
    assert "phantom-01" not in {n.name for n in fleet_snapshot().nodes}
    assert "phantom-01" not in {n.name for n in fleet_snapshot(empty=True).nodes}

    # The tenant's job waits: the one approved T4 is cordoned (so the request is feasible, not placeable).
    real = Node.objects.create(cluster=demo, name="t4-real-01")
    Device.objects.create(
        node=real, vendor="nvidia", index=0, uuid="GPU-real", device_model=t4, cordoned=True
    )
    user = make_user("tenant")
    project = make_project("tenant", members=[user])
    job = submit_whole_cards(project, user, t4, name="j")
    assert job.pk not in scheduling.scheduling_cycle_run().placed_job_ids
    assert not Allocation.objects.filter(job=job).exists()

    node_approve(node=phantom, actor=staff_user)
    phantom.refresh_from_db()
    assert not phantom.pending_approval and phantom.schedulable
    assert "phantom-01" in {n.name for n in fleet_snapshot().nodes}
    assert job.pk in scheduling.scheduling_cycle_run().placed_job_ids
    assert Allocation.objects.get(job=job).node == phantom


def test_a_bound_token_may_not_report_for_another_node_and_nothing_is_written(api_client, demo, staff_user):
    node_report_ingest(
        node_name="gpu-a02", kind="nvidia-smi-csv", text=gpu_csv(uuids(2)), actor=staff_user, cluster=demo
    )
    events, reports = DeviceEvent.objects.count(), NodeReport.objects.count()
    client = agent_client(api_client, demo, node_pattern="gpu-a01")
    # An empty inventory for another node would mark its cards LOST.
    response = post(client, "gpu-a02", "index, name, uuid, memory.total [MiB]\n")
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "permission_denied"
    assert "gpu-a01" in error["message"] and "gpu-a02" in error["message"]
    assert set(Device.objects.values_list("health", flat=True)) == {Device.Health.HEALTHY}
    assert (DeviceEvent.objects.count(), NodeReport.objects.count()) == (events, reports)
    # Nor register a node of its own choosing, nor dry-run one.
    assert post(client, "gpu-z99", gpu_csv(uuids(1, "GPU-9999"))).status_code == 403
    assert post(client, "gpu-z99", gpu_csv(uuids(1, "GPU-9999")), dry_run=True).status_code == 403
    assert not Node.objects.filter(name="gpu-z99").exists()
    # Its own node it reports for.
    assert post(client, "gpu-a01", gpu_csv(uuids(1, "GPU-a001"))).status_code == 201


def test_a_pattern_token_covers_the_nodes_it_matches_only(demo):
    token, _ = agent_token_create(cluster=demo, name="rack a", node_pattern="gpu-a*", actor="test")
    assert token.covers("gpu-a01") and token.covers("gpu-a.rack3")
    assert not token.covers("gpu-b01") and not token.covers("xgpu-a01")
    unbound, _ = agent_token_create(cluster=demo, name="legacy", actor="test")
    assert unbound.covers("anything-01")
    for bad in ("GPU-A*", "gpu[ab]*", "gpu-?1", "gpu a", "x" * 254):
        with pytest.raises(ValidationFailed):
            agent_token_create(cluster=demo, name="bad", node_pattern=bad, actor="test")
    assert AgentToken.objects.count() == 2


@pytest.mark.parametrize(
    "name",
    [
        '=HYPERLINK("http://evil","x")',
        "node<script>",
        "-1+2",
        "GPU-01",
        "gpu_01",
        "gpu-01-",
        ".gpu",
        "a" * 254,
    ],
)
def test_a_node_name_kubernetes_would_refuse_is_a_400_and_writes_nothing(api_client, demo, staff_user, name):
    for client in (agent_client(api_client, demo), None):
        if client is None:
            api_client.credentials()
            api_client.force_authenticate(staff_user)
            client = api_client
        response = post(client, name, gpu_csv(uuids(1)), cluster="demo")
        assert response.status_code == 400, (name, response.content)
        assert "node" in response.json()["error"]["details"]
    assert not Node.objects.exists() and not Device.objects.exists() and not NodeReport.objects.exists()


def test_valid_kubernetes_node_names_are_accepted(api_client, demo):
    client = agent_client(api_client, demo)
    for i, name in enumerate(("gpu-a01", "node-7.rack3.dc1", "a", "1" + "b" * 252)):
        response = post(client, name, gpu_csv(uuids(1, f"GPU-{i:04d}")))
        assert response.status_code == 201, (name, response.content)


def test_an_unbound_token_reports_for_approved_nodes_and_they_stay_approved(api_client, demo, staff_user):
    node_report_ingest(
        node_name="gpu-01", kind="nvidia-smi-csv", text=gpu_csv(uuids(2)), actor=staff_user, cluster=demo
    )
    assert not Node.objects.get(name="gpu-01").pending_approval  # staff acting is the approval
    client = agent_client(api_client, demo)
    response = post(client, "gpu-01", gpu_csv(uuids(2)))
    assert response.status_code == 201, response.content
    assert response.json()["result"]["updated"] + response.json()["result"]["unchanged"] == 2
    assert not Node.objects.get(name="gpu-01").pending_approval
    # Marking a card of a node it did not register lost is not an unbound token's to say (issue 27
    # §4, tests/inventory/test_agent_card_loss.py).
    assert post(client, "gpu-01", gpu_csv(uuids(1))).status_code == 403


def test_the_command_registers_approved_nodes(demo, tmp_path):
    path = tmp_path / "gpu.csv"
    path.write_text(gpu_csv(uuids(1)))
    call_command("ingest_node_report", str(path), node="gpu-cli-01", kind="nvidia-smi-csv", cluster="demo")
    node = Node.objects.get(name="gpu-cli-01")
    assert not node.pending_approval and node.schedulable


def test_staff_approve_a_pending_node_through_the_api_and_others_cannot(
    api_client, demo, staff_user, make_user
):
    node_report_ingest(
        node_name="gpu-01", kind="nvidia-smi-csv", text=gpu_csv(uuids(1)), actor="test", cluster=demo
    )
    Node.objects.filter(name="gpu-01").update(pending_approval=True)
    node = Node.objects.get(name="gpu-01")
    url = f"/api/inventory/nodes/{node.pk}/approve/"

    agent = agent_client(api_client, demo)
    assert agent.post(url).status_code == 403
    api_client.credentials()
    api_client.force_authenticate(make_user("member"))
    assert api_client.post(url).status_code in (403, 404)
    node.refresh_from_db()
    assert node.pending_approval

    api_client.force_authenticate(staff_user)
    response = api_client.post(url)
    assert response.status_code == 200, response.content
    assert response.json()["pending_approval"] is False
    record = ChangeRecord.objects.get(action="node.approve")
    assert record.before == {"pending_approval": True} and record.actor == staff_user
    assert DeviceEvent.objects.filter(node=node, kind=DeviceEvent.Kind.STATUS_CHANGED).count() == 1
    # Approving again changes nothing.
    assert api_client.post(url).status_code == 200
    assert ChangeRecord.objects.filter(action="node.approve").count() == 1


@pytest.mark.django_db(transaction=True)
def test_approving_in_autocommit_takes_its_own_transaction(demo, staff_user):
    """``node_approve`` locks the node row, so it opens its own transaction: called in autocommit, as
    the API view calls it, it admits the node instead of failing (a 500 the API fuzzing found)."""
    node = Node.objects.create(cluster=demo, name="gpu-01", pending_approval=True)
    assert not transaction.get_connection().in_atomic_block
    node_approve(node=node, actor=staff_user)
    node.refresh_from_db()
    assert not node.pending_approval


def test_the_admin_approve_action_admits_pending_nodes(client, demo, staff_user):
    staff_user.is_superuser = True
    staff_user.save()
    pending = Node.objects.create(cluster=demo, name="gpu-01", pending_approval=True)
    approved = Node.objects.create(cluster=demo, name="gpu-02")
    client.force_login(staff_user)
    response = client.post(
        reverse("admin:inventory_node_changelist"),
        {"action": "approve", "_selected_action": [pending.pk, approved.pk]},
        follow=True,
    )
    assert response.status_code == 200
    pending.refresh_from_db()
    assert not pending.pending_approval
    assert ChangeRecord.objects.filter(action="node.approve", object_id=str(pending.pk)).count() == 1
    assert ChangeRecord.objects.filter(action="node.approve").count() == 1


def test_a_cluster_sync_confirms_pending_nodes_that_kubernetes_lists(demo, east):
    mine = Node.objects.create(cluster=demo, name="gpu-01", pending_approval=True)
    unlisted = Node.objects.create(cluster=demo, name="gpu-02", pending_approval=True)
    elsewhere = Node.objects.create(cluster=east["cluster"], name="gpu-01", pending_approval=True)
    approved = node_confirm_in_cluster(cluster=demo, node_names=["gpu-01", "east-01"])
    assert approved == [mine]
    assert [
        n.pending_approval
        for n in Node.objects.filter(pk__in=[mine.pk, unlisted.pk, elsewhere.pk]).order_by("pk")
    ] == [
        False,
        True,
        True,
    ]
    assert ChangeRecord.objects.get(action="node.approve").actor_label == "cluster-sync"


def test_the_admin_creates_a_token_bound_to_a_node_pattern(client, demo, staff_user):
    staff_user.is_superuser = True
    staff_user.save()
    client.force_login(staff_user)
    response = client.post(
        reverse("admin:inventory_agenttoken_add"),
        {"cluster": demo.pk, "name": "rack-12", "node_pattern": "gpu-r12-*"},
        follow=True,
    )
    assert response.status_code == 200
    token = AgentToken.objects.get(name="rack-12")
    assert token.node_pattern == "gpu-r12-*"
    assert ChangeRecord.objects.get(action="agent_token.create").after["node_pattern"] == "gpu-r12-*"
    bad = client.post(
        reverse("admin:inventory_agenttoken_add"),
        {"cluster": demo.pk, "name": "bad", "node_pattern": "GPU_*"},
    )
    assert bad.status_code == 200 and not AgentToken.objects.filter(name="bad").exists()


# --------------------------------------------------------------------------------------------------
# 11 (part): the report's vendor must be the node's; a card needs an identity


ANONYMOUS_ROCM = json.dumps(
    {
        "card0": {"Card series": "N/A", "Card model": "N/A", "Card vendor": "N/A"},
        "system": {"Driver version": "6.2.13"},
    }
)
HY_SMI = """============================ System Management Interface =============================
======================================================================================
DCU     Temp     AvgPwr     Perf     PwrCap     VRAM%      DCU%      Mode
0       43.0C    120.0W     auto     450.0W     5%         0.0%      Normal
======================================================================================
=================================== End of SMI Log ===================================
"""


@pytest.fixture
def hygon_node(demo):
    node = Node.objects.create(cluster=demo, name="dcu-01", dtk_version="24.04.1")
    Device.objects.create(node=node, vendor="hygon", index=0, serial="HYD0000001", memory_mib=32768)
    return node


def test_a_rocm_smi_report_for_a_hygon_node_is_a_400_and_writes_nothing(api_client, demo, hygon_node):
    client = agent_client(api_client, demo)
    response = post(client, "dcu-01", ANONYMOUS_ROCM, kind="rocm-smi-json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "vendor_mismatch"
    assert "amd" in error["message"] and "hygon" in error["message"] and "dcu-01" in error["message"]
    assert list(Device.objects.values_list("vendor", flat=True)) == ["hygon"]
    assert not NodeReport.objects.exists() and not DeviceEvent.objects.exists()
    hygon_node.refresh_from_db()
    assert hygon_node.driver_version == "" and hygon_node.last_report_at is None


def test_a_card_with_no_identity_at_all_is_a_400_and_registers_nothing(api_client, demo, staff_user):
    api_client.force_authenticate(staff_user)
    response = post(api_client, "gpu-new-01", ANONYMOUS_ROCM, kind="rocm-smi-json", cluster="demo")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "device_without_identity" and "#0" in error["message"]
    assert error["details"] == {"devices": [0]}
    assert not Node.objects.exists() and not Device.objects.exists() and not NodeReport.objects.exists()


def test_hy_smi_still_refreshes_the_hygon_cards_the_ledger_knows(api_client, demo, hygon_node):
    client = agent_client(api_client, demo)
    response = post(client, "dcu-01", HY_SMI, kind="hy-smi")
    assert response.status_code == 201, response.content
    assert response.json()["result"]["unchanged"] == 1
    assert Device.objects.get(node=hygon_node).health == Device.Health.HEALTHY


# --------------------------------------------------------------------------------------------------
# the demo


def test_the_demo_nodes_are_approved_and_its_agent_token_reports_for_them(api_client, capsys):
    call_command("load_demo")
    out = capsys.readouterr().out
    key = next(word for word in out.split() if word.startswith("sca_"))
    assert Node.objects.count() >= 5
    assert not Node.objects.filter(pending_approval=True).exists()
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    card = Device.objects.filter(node__name="t4-infer-01").order_by("index").first()
    response = post(api_client, "t4-infer-01", t4_csv((card.index, card.uuid)))
    assert response.status_code == 201, response.content
    assert response.json()["node_pending_approval"] is False
    assert response.json()["result"]["conflicts"] == 0
