"""Operations edge cases (issue 21, item 10): cards unhealthy before a soak, and what a rollback does
with the nodes the batch's failure quarantined."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apps.clusters.models import PushAction
from apps.core.errors import Conflict, InvalidTransition, ValidationFailed
from apps.inventory.models import Device, DeviceEvent, Node
from apps.rollout import services
from apps.rollout.models import GrayBatch, SoakResult
from apps.scheduling.faults import cards_fault

pytestmark = pytest.mark.django_db

QUARANTINE = "suanchi.io/quarantine"


def lose(card, *, at=None) -> None:
    """What discovery writes when a card vanishes from a node report (掉卡)."""
    Device.objects.filter(pk=card.pk).update(health=Device.Health.LOST)
    event = DeviceEvent.objects.create(
        node=card.node, device=card, kind=DeviceEvent.Kind.LOST, severity="critical", message="card lost"
    )
    if at is not None:
        DeviceEvent.objects.filter(pk=event.pk).update(created_at=at)


def batch_on(node, criteria, slug="lot-9") -> GrayBatch:
    return services.batch_create(
        actor="ops",
        name=f"batch {slug}",
        slug=slug,
        kind="driver",
        target_version="550.90.07",
        criteria=criteria,
        nodes=[node],
    )


def node_taints(node) -> set[str]:
    patch = PushAction.objects.filter(verb="patch", kind="Node", name=node.name).order_by("pk").last()
    return {t["key"] for t in patch.object["spec"].get("taints", [])}


# ------------------------------------------------------------------ (a) unhealthy before the soak


def test_a_card_lost_before_the_soak_is_left_out_with_an_event_and_not_counted(fleet, criteria, now):
    node = fleet["gpu-02"]
    lost = node.devices.get(index=2)
    degraded = node.devices.get(index=3)
    lose(lost, at=now - timedelta(days=1))
    Device.objects.filter(pk=degraded.pk).update(health=Device.Health.DEGRADED)
    batch = batch_on(node, criteria)

    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=3))

    batch.refresh_from_db()
    assert [(e["card"], e["reason"]) for e in batch.excluded_devices] == [
        (str(lost), "lost before the soak started"),
        (str(degraded), "degraded before the soak started"),
    ]
    assert batch.stage_reason == (
        f"soak started on 1 node(s); 2 card(s) left out, unhealthy before the soak: {lost}, {degraded}"
    )
    event = DeviceEvent.objects.filter(device=lost, kind=DeviceEvent.Kind.UPDATED).latest("pk")
    assert event.message == f"card {lost} left out of gray batch batch lot-9: lost before the soak started"
    assert event.severity == DeviceEvent.Severity.WARNING
    pools = dict(node.devices.values_list("index", "pool_status"))
    assert pools == {0: "gray", 1: "gray", 2: "production", 3: "production"}

    # The soak judges only what happens during it: the loss before it is no violation.
    result = services.batch_evaluate(batch=batch, actor="worker", now=now)
    assert result.verdict == SoakResult.Verdict.PENDING
    assert result.lost_devices == 0 and result.violations == []
    assert result.evidence["excluded_device_ids"] == sorted([lost.pk, degraded.pk])
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.SOAKING

    # A card of the batch lost during the soak still fails it.
    lose(node.devices.get(index=0))
    result = services.batch_evaluate(batch=batch, actor="worker", now=now + timedelta(minutes=1))
    assert result.verdict == SoakResult.Verdict.FAIL and result.lost_devices == 1


def test_a_soak_with_no_healthy_card_left_is_refused_and_writes_nothing(fleet, criteria, now):
    node = fleet["gpu-02"]
    for card in node.devices.all():
        lose(card, at=now - timedelta(days=1))
    batch = batch_on(node, criteria)
    with pytest.raises(Conflict) as refused:
        services.batch_soak_start(batch=batch, actor="ops", now=now)
    assert refused.value.status_code == 409 and refused.value.code == "no_healthy_card"
    batch.refresh_from_db()
    assert batch.stage == GrayBatch.Stage.PLANNED and batch.excluded_devices == []
    assert not DeviceEvent.objects.filter(node=node, kind=DeviceEvent.Kind.UPDATED).exists()


# ------------------------------------------------------------------ (b) rollback and quarantine


def test_rolling_back_releases_a_node_that_only_the_batch_failure_quarantined(fleet, criteria, now):
    node = fleet["gpu-01"]
    batch = batch_on(node, criteria)
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=2))
    services.batch_fail(batch=batch, actor="ops", reason="XID 79 storm after the upgrade")
    node.refresh_from_db()
    assert node.status == Node.Status.QUARANTINED and QUARANTINE in node_taints(node)

    batch = services.batch_rollback(batch=batch, actor="ops", reason="driver 550.90 reverted")

    node.refresh_from_db()
    assert node.status == Node.Status.READY
    assert QUARANTINE not in node_taints(node)
    assert set(node.devices.values_list("pool_status", flat=True)) == {Device.PoolStatus.PRODUCTION}
    assert batch.quarantine_outcome == {"released": ["gpu-01"], "kept": []}
    assert batch.stage == GrayBatch.Stage.ROLLED_BACK
    assert batch.stage_reason == "driver 550.90 reverted (quarantine released on gpu-01)"
    release = DeviceEvent.objects.filter(node=node, device=None, kind=DeviceEvent.Kind.QUARANTINE).latest(
        "pk"
    )
    assert release.message.startswith("node gpu-01 released from quarantine to ready: gray batch")


def test_a_node_with_a_node_level_fault_stays_quarantined_and_is_released_by_staff(fleet, criteria, now):
    node = fleet["gpu-01"]
    batch = batch_on(node, criteria)
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=2))
    services.batch_fail(batch=batch, actor="ops", reason="XID 79 storm after the upgrade")
    # Two separate card faults on the node: a node-level fault, whatever the batch did.
    cards = list(node.devices.order_by("index"))
    cards_fault(devices=[cards[0]], reason="Xid 79 on card 0", actor="reconciler")
    cards_fault(devices=[cards[1]], reason="Xid 48 on card 1", actor="reconciler")
    # The release needs a rolled-back batch (the change reverted first).
    with pytest.raises(InvalidTransition, match="roll it back"):
        services.batch_node_release(batch=batch, node=node, actor="ops", reason="checked")

    batch = services.batch_rollback(batch=batch, actor="ops", reason="driver reverted")

    node.refresh_from_db()
    why = "2 separate card faults on the node, a node-level fault"
    assert node.status == Node.Status.QUARANTINED
    assert batch.quarantine_outcome == {"released": [], "kept": [{"node": "gpu-01", "reason": why}]}
    assert batch.stage_reason == f"driver reverted (still quarantined: gpu-01: {why})"
    stays = DeviceEvent.objects.filter(node=node, kind=DeviceEvent.Kind.QUARANTINE).latest("pk")
    assert (
        stays.message == f"node gpu-01 stays quarantined after the rollback of gray batch {batch.name}: {why}"
    )

    with pytest.raises(ValidationFailed):
        services.batch_node_release(batch=batch, node=node, actor="ops", reason="  ")
    with pytest.raises(ValidationFailed):
        services.batch_node_release(batch=batch, node=fleet["gpu-02"], actor="ops", reason="checked")
    services.batch_node_release(batch=batch, node=node, actor="ops", reason="cards 0 and 1 reseated")
    node.refresh_from_db()
    assert node.status == Node.Status.READY and QUARANTINE not in node_taints(node)
    assert node.status_reason == f"released from the page of gray batch {batch.name}: cards 0 and 1 reseated"
    assert set(node.devices.values_list("pool_status", flat=True)) == {Device.PoolStatus.PRODUCTION}
    # card-level containment stays: the faulty cards are still cordoned
    assert list(node.devices.filter(cordoned=True).order_by("index").values_list("index", flat=True)) == [
        0,
        1,
    ]
    with pytest.raises(InvalidTransition, match="not quarantined"):
        services.batch_node_release(batch=batch, node=node, actor="ops", reason="again")


def test_a_node_quarantined_for_another_reason_stays_quarantined(fleet, criteria, now):
    from apps.scheduling.faults import node_status_change

    node = fleet["gpu-01"]
    batch = batch_on(node, criteria)
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=2))
    services.batch_rollback(batch=batch, actor="ops", reason="not needed")  # soaking → rolled back
    # an operator quarantines the node for their own reason; a later rollback of another batch
    other = batch_on(node, criteria, slug="lot-10")
    services.batch_soak_start(batch=other, actor="ops", now=now - timedelta(hours=1))
    node_status_change(node=node, status=Node.Status.QUARANTINED, reason="PSU replacement", actor="ops")
    other = services.batch_rollback(batch=other, actor="ops", reason="reverted")
    node.refresh_from_db()
    assert node.status == Node.Status.QUARANTINED
    assert other.quarantine_outcome["kept"] == [
        {"node": "gpu-01", "reason": "it is quarantined for another reason (PSU replacement)"}
    ]


# ------------------------------------------------------------------ the batch page


@pytest.fixture
def staff(client, staff_user):
    client.force_login(staff_user)
    return client


def test_the_batch_page_says_the_node_stays_quarantined_and_offers_the_release(staff, fleet, criteria, now):
    node = fleet["gpu-01"]
    lost = node.devices.get(index=3)
    lose(lost, at=now - timedelta(days=1))
    batch = batch_on(node, criteria)
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=2))
    services.batch_fail(batch=batch, actor="ops", reason="XID 79 storm after the upgrade")
    url = f"/rollout/batches/{batch.pk}/"

    body = staff.get(url).content.decode()
    assert f"{lost}: lost before the soak started" in body  # the card left out, and why
    assert "Node gpu-01 is quarantined." in body
    assert "Roll the batch back (revert the change on the node) before releasing it." in body
    assert 'data-release-node="' not in body

    cards_fault(devices=[node.devices.get(index=0)], reason="Xid 79 on card 0", actor="reconciler")
    services.batch_rollback(batch=batch, actor="ops", reason="driver reverted")
    page = staff.get(url)
    body = page.content.decode()
    assert page.status_code == 200
    assert "Node gpu-01 stays quarantined." in body
    assert "2 separate card faults on the node, a node-level fault" in body
    assert f'data-release-node="{node.pk}"' in body and 'name="reason"' in body

    refused = staff.post(f"{url}release-node/", {"node": node.pk, "reason": " "})
    assert refused.status_code == 400 and "data-release-error" in refused.content.decode()
    node.refresh_from_db()
    assert node.status == Node.Status.QUARANTINED
    outsider = staff.post(f"{url}release-node/", {"node": fleet["gpu-02"].pk, "reason": "x"})
    assert outsider.status_code == 400

    done = staff.post(f"{url}release-node/", {"node": node.pk, "reason": "card 0 replaced"})
    assert done.status_code == 302 and done["Location"] == url
    node.refresh_from_db()
    assert node.status == Node.Status.READY
    assert 'id="quarantined-nodes"' not in staff.get(url).content.decode()
    again = staff.post(f"{url}release-node/", {"node": node.pk, "reason": "again"})
    assert again.status_code == 409 and "not quarantined" in again.content.decode()


def test_only_staff_release_nodes_from_the_batch_page(client, make_user, fleet, criteria):
    batch = batch_on(fleet["gpu-01"], criteria)
    client.force_login(make_user("member-only"))
    response = client.post(f"/rollout/batches/{batch.pk}/release-node/", {"node": 1, "reason": "x"})
    assert response.status_code == 403


# ------------------------------------------------------------------ the API


def test_the_rollback_command_says_which_nodes_stay_quarantined_and_release_node_frees_them(
    api_client, staff_user, fleet, criteria, now
):
    api_client.force_authenticate(staff_user)
    node = fleet["gpu-01"]
    batch = batch_on(node, criteria)
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=2))
    services.batch_fail(batch=batch, actor="ops", reason="resets")
    for card, cause in ((0, "Xid 79 on card 0"), (1, "Xid 48 on card 1")):
        cards_fault(devices=[node.devices.get(index=card)], reason=cause, actor="reconciler")
    api = f"/api/rollout/batches/{batch.pk}"

    body = api_client.post(f"{api}/rollback/", {"reason": "reverted"}, format="json").json()
    assert body["stage"] == "rolled_back"
    assert body["quarantine"] == {
        "released": [],
        "kept": [{"node": "gpu-01", "reason": "2 separate card faults on the node, a node-level fault"}],
    }
    missing = api_client.post(f"{api}/release-node/", {"node": node.pk}, format="json")
    assert missing.status_code == 400 and "reason" in str(missing.json())
    done = api_client.post(f"{api}/release-node/", {"node": node.pk, "reason": "reseated"}, format="json")
    assert done.status_code == 200 and done.json()["stage"] == "rolled_back"
    node.refresh_from_db()
    assert node.status == Node.Status.READY
    again = api_client.post(f"{api}/release-node/", {"node": node.pk, "reason": "again"}, format="json")
    assert again.status_code == 409


def test_the_admin_rollback_warns_when_a_node_stays_quarantined(staff, fleet, criteria, now):
    node = fleet["gpu-01"]
    batch = batch_on(node, criteria)
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=2))
    services.batch_fail(batch=batch, actor="ops", reason="resets")
    for card, cause in ((0, "Xid 79 on card 0"), (1, "Xid 48 on card 1")):
        cards_fault(devices=[node.devices.get(index=card)], reason=cause, actor="reconciler")
    response = staff.post(
        "/admin/rollout/graybatch/", {"action": "rollback", "_selected_action": [batch.pk]}, follow=True
    )
    body = response.content.decode()
    assert "Node gpu-01 stays quarantined: 2 separate card faults on the node, a node-level fault." in body
    assert staff.get(f"/admin/rollout/graybatch/{batch.pk}/change/").status_code == 200
