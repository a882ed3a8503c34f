"""Gray-release batches walked end to end on telemetry written through the telemetry ingest path."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from apps.clusters.models import PushAction
from apps.core.errors import Conflict, InvalidTransition, ValidationFailed
from apps.core.models import ChangeRecord
from apps.inventory.models import Device, DeviceEvent, Node
from apps.notify import services as notify_services
from apps.notify.models import Delivery, Event
from apps.rollout import services
from apps.rollout.models import GrayBatch, SoakResult
from tests.fixtures.rollout import ingest_soak

pytestmark = pytest.mark.django_db

GRAY = "suanchi.io/gray"


def node_patches(node):
    return PushAction.objects.filter(verb="patch", kind="Node", name=node.name).order_by("pk")


def latest_patch(node):
    return node_patches(node).last()


@pytest.fixture
def driver_batch(fleet, criteria, now):
    baseline = services.benchmark_run_record(
        actor="harness",
        name="resnet50-bf16-train",
        node=fleet["gpu-02"],
        throughput=Decimal("1000"),
        unit="images/s",
        measured_at=now - timedelta(days=3),
    )
    return services.batch_create(
        actor="ops",
        name="NVIDIA 550.90 canary",
        slug="nv-550-90",
        kind="driver",
        target_version="550.90.07",
        criteria=criteria,
        baseline_run=baseline,
        nodes=[fleet["gpu-01"]],
    )


def test_starting_a_soak_puts_the_nodes_in_the_gray_pool_and_pushes_label_and_taint(fleet, driver_batch, now):
    services.batch_soak_start(batch=driver_batch, actor="ops", now=now - timedelta(hours=1))
    driver_batch.refresh_from_db()
    node = Node.objects.get(pk=fleet["gpu-01"].pk)
    assert driver_batch.stage == GrayBatch.Stage.SOAKING
    assert set(node.devices.values_list("pool_status", flat=True)) == {Device.PoolStatus.GRAY}
    assert set(fleet["gpu-02"].devices.values_list("pool_status", flat=True)) == {
        Device.PoolStatus.PRODUCTION
    }
    assert node.labels[GRAY] == "nv-550-90"
    assert {"key": GRAY, "value": "true", "effect": "NoSchedule"} in node.taints
    patch = latest_patch(node)
    assert patch.state == PushAction.State.PENDING
    assert patch.object["metadata"]["labels"][GRAY] == "nv-550-90"
    assert {"key": GRAY, "value": "true", "effect": "NoSchedule"} in patch.object["spec"]["taints"]
    # the vendor taint the node already had is kept
    assert any(t["key"] == "accelerator" for t in patch.object["spec"]["taints"])
    assert ChangeRecord.objects.filter(action="graybatch.soaking", object_id=str(driver_batch.pk)).exists()


def test_a_clean_soak_passes_and_admission_returns_the_cards_to_production(fleet, driver_batch, now):
    start = now - timedelta(hours=25)
    services.batch_soak_start(batch=driver_batch, actor="ops", now=start)
    ingest_soak([fleet["gpu-01"]], start=start, end=now - timedelta(minutes=2), now=now)

    # Half-way: nothing wrong, but not soaked long enough and no benchmark yet.
    half = services.batch_evaluate(batch=driver_batch, actor="worker", now=start + timedelta(hours=12))
    assert half.verdict == SoakResult.Verdict.PENDING
    assert any("soak time" in m for m in half.missing)
    assert any("benchmark run" in m for m in half.missing)
    with pytest.raises(InvalidTransition, match="soak has not passed"):
        services.batch_admit(batch=driver_batch, actor="ops")

    services.benchmark_run_record(
        actor="harness",
        name="resnet50-bf16-train",
        node=fleet["gpu-01"],
        batch=driver_batch,
        throughput=Decimal("985"),
        unit="images/s",
        measured_at=now - timedelta(hours=2),
    )
    result = services.batch_evaluate(batch=driver_batch, actor="worker", now=now)
    assert result.pk == half.pk  # the pending result is updated in place
    assert result.verdict == SoakResult.Verdict.PASS, (result.violations, result.missing)
    assert result.error_events == 0 and result.lost_devices == 0
    assert result.max_temperature_c == 70.0
    assert result.telemetry_coverage_pct >= Decimal("90")
    assert result.throughput_drop_pct == Decimal("1.50")
    assert result.evidence["series"] and result.evidence["series"][0]["util_avg"] == 60.0
    driver_batch.refresh_from_db()
    assert driver_batch.stage == GrayBatch.Stage.PASSED

    before = node_patches(fleet["gpu-01"]).count()
    services.batch_admit(batch=driver_batch, actor="ops")
    driver_batch.refresh_from_db()
    node = Node.objects.get(pk=fleet["gpu-01"].pk)
    assert driver_batch.stage == GrayBatch.Stage.ADMITTED
    assert set(node.devices.values_list("pool_status", flat=True)) == {Device.PoolStatus.PRODUCTION}
    assert GRAY not in node.labels
    assert all(t["key"] != GRAY for t in node.taints)
    assert node_patches(node).count() == before + 1
    patch = latest_patch(node)
    assert patch.state == PushAction.State.PENDING
    assert patch.object["metadata"]["labels"][GRAY] is None  # removed on the Kubernetes node
    assert all(t["key"] != GRAY for t in patch.object["spec"]["taints"])


def test_an_error_burst_fails_the_batch_and_quarantines_its_nodes(fleet, criteria, now):
    batch = services.batch_create(
        actor="ops",
        name="Ascend firmware 24.1.rc3",
        slug="ascend-fw-rc3",
        kind="firmware",
        target_version="24.1.rc3",
        criteria=criteria,
        nodes=[fleet["npu-01"]],
    )
    start = now - timedelta(hours=6)
    services.batch_soak_start(batch=batch, actor="ops", now=start)
    ingest_soak(
        [fleet["npu-01"]],
        start=start,
        end=now - timedelta(minutes=2),
        burst_at=now - timedelta(hours=2),
        now=now,
    )
    assert DeviceEvent.objects.filter(node=fleet["npu-01"], severity="critical").exists()

    result = services.batch_evaluate(batch=batch, actor="worker", now=now)
    assert result.verdict == SoakResult.Verdict.FAIL
    assert result.error_events > 0
    assert result.evidence["counter_increases"]["ecc_dbe"] > 0
    assert [v["criterion"] for v in result.violations] == ["max_error_events"]
    batch.refresh_from_db()
    node = Node.objects.get(pk=fleet["npu-01"].pk)
    assert batch.stage == GrayBatch.Stage.FAILED
    assert batch.stage_reason.startswith("soak failed:")
    assert node.status == Node.Status.QUARANTINED
    assert set(node.devices.values_list("pool_status", flat=True)) == {Device.PoolStatus.QUARANTINE}
    assert GRAY not in node.labels
    patch = latest_patch(node)
    taints = {t["key"] for t in patch.object["spec"]["taints"]}
    assert "suanchi.io/quarantine" in taints and GRAY not in taints
    # a failed batch is never admitted
    with pytest.raises(InvalidTransition):
        services.batch_admit(batch=batch, actor="ops")


def hot_batch(fleet, criteria, start):
    batch = services.batch_create(
        actor="ops",
        name="hot",
        slug="hot",
        kind="hardware",
        target_version="lot 7",
        criteria=criteria,
        nodes=[fleet["gpu-02"]],
    )
    services.batch_soak_start(batch=batch, actor="ops", now=start)
    return batch


def test_a_hot_card_fails_the_soak(fleet, criteria, now):
    start = now - timedelta(hours=3)
    batch = hot_batch(fleet, criteria, start)
    ingest_soak([fleet["gpu-02"]], start=start, end=now - timedelta(minutes=2), temp=88.0, now=now)
    result = services.batch_evaluate(batch=batch, actor="worker", now=now)
    assert result.verdict == SoakResult.Verdict.FAIL
    assert [v["criterion"] for v in result.violations] == ["max_temperature_c"]
    assert result.max_temperature_c == 88.0


def test_without_telemetry_a_soak_never_passes(fleet, criteria, now):
    criteria = services.soak_criteria_update(criteria=criteria, actor="ops", max_throughput_drop_pct=None)
    batch = services.batch_create(
        actor="ops",
        name="quiet",
        slug="quiet",
        kind="collector",
        target_version="2.1",
        criteria=criteria,
        nodes=[fleet["gpu-02"]],
    )
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(days=2))
    result = services.batch_evaluate(batch=batch, actor="worker", now=now)
    assert result.verdict == SoakResult.Verdict.PENDING
    assert result.telemetry_coverage_pct == 0
    assert any("telemetry coverage" in m for m in result.missing)


def test_a_node_in_one_soaking_batch_cannot_start_in_another(fleet, driver_batch, criteria, now):
    services.batch_soak_start(batch=driver_batch, actor="ops", now=now)
    other = services.batch_create(
        actor="ops",
        name="other",
        slug="other",
        kind="driver",
        target_version="560",
        criteria=criteria,
        nodes=[fleet["gpu-01"], fleet["gpu-02"]],
    )
    with pytest.raises(Conflict, match="already in gray batch"):
        services.batch_soak_start(batch=other, actor="ops")
    other.refresh_from_db()
    assert other.stage == GrayBatch.Stage.PLANNED
    # nothing half-written: gpu-02 stayed in production
    assert set(fleet["gpu-02"].devices.values_list("pool_status", flat=True)) == {
        Device.PoolStatus.PRODUCTION
    }


def test_rollback_returns_gray_cards_and_needs_a_reason(fleet, driver_batch, now):
    services.batch_soak_start(batch=driver_batch, actor="ops", now=now)
    with pytest.raises(ValidationFailed):
        services.batch_rollback(batch=driver_batch, actor="ops", reason=" ")
    services.batch_rollback(batch=driver_batch, actor="ops", reason="driver 550.90 reverted")
    driver_batch.refresh_from_db()
    node = Node.objects.get(pk=fleet["gpu-01"].pk)
    assert driver_batch.stage == GrayBatch.Stage.ROLLED_BACK
    assert set(node.devices.values_list("pool_status", flat=True)) == {Device.PoolStatus.PRODUCTION}
    assert GRAY not in node.labels
    assert node.status == Node.Status.READY


def test_the_beat_task_evaluates_soaking_batches(fleet, driver_batch, now):
    from worker.tasks.rollout import rollout_evaluate_task

    services.batch_soak_start(batch=driver_batch, actor="ops", now=now - timedelta(hours=1))
    assert rollout_evaluate_task.apply().get() == {"evaluated": 1, "passed": 0, "failed": 0, "errors": 0}
    assert SoakResult.objects.filter(batch=driver_batch, verdict="pending").count() == 1


def test_the_pushed_patches_reach_the_simulated_cluster(fleet, driver_batch, now):
    from apps.clusters.connections import backend_for
    from apps.clusters.pusher import push_stream_run

    node = fleet["gpu-01"]
    services.batch_soak_start(batch=driver_batch, actor="ops", now=now)
    stream = latest_patch(node).stream
    assert push_stream_run(stream=stream)["applied"] == 1
    live = backend_for(node.cluster).get("Node", None, node.name)
    assert live["metadata"]["labels"][GRAY] == "nv-550-90"
    assert {"key": GRAY, "value": "true", "effect": "NoSchedule"} in live["spec"]["taints"]

    services.batch_rollback(batch=driver_batch, actor="ops", reason="reverted")
    assert push_stream_run(stream=stream)["applied"] == 1
    live = backend_for(node.cluster).get("Node", None, node.name)
    assert GRAY not in live["metadata"]["labels"]
    assert all(t["key"] != GRAY for t in live["spec"].get("taints", []))


def test_a_lost_card_fails_the_soak(fleet, criteria, now):
    batch = services.batch_create(
        actor="ops",
        name="lot 8",
        slug="lot-8",
        kind="hardware",
        target_version="lot 8",
        criteria=criteria,
        nodes=[fleet["gpu-02"]],
    )
    services.batch_soak_start(batch=batch, actor="ops", now=now - timedelta(hours=3))
    card = fleet["gpu-02"].devices.get(index=2)
    # What discovery writes when a card vanishes from a node report (掉卡).
    Device.objects.filter(pk=card.pk).update(health=Device.Health.LOST)
    DeviceEvent.objects.create(
        node=card.node, device=card, kind=DeviceEvent.Kind.LOST, severity="critical", message="card lost"
    )
    result = services.batch_evaluate(batch=batch, actor="worker", now=now)
    assert result.verdict == SoakResult.Verdict.FAIL
    assert result.lost_devices == 1 and result.error_events == 0
    assert [v["criterion"] for v in result.violations] == ["max_lost_devices"]


# A failed soak notifies the platform staff from the service that evaluates it (batch_evaluate), not from
# a post_save receiver: an evaluation that turns the pending result into a failure (an update, no new
# row) notifies too.


@pytest.fixture
def staff_inbox(staff_user):
    return notify_services.subscription_create(
        actor=staff_user, channel="email", target="ops@example.com", events=[Event.GRAY_BATCH_FAILED]
    )


def test_a_failed_soak_notifies_the_staff_once(fleet, criteria, now, staff_inbox):
    start = now - timedelta(hours=3)
    batch = hot_batch(fleet, criteria, start)
    ingest_soak([fleet["gpu-02"]], start=start, end=now - timedelta(minutes=2), temp=88.0, now=now)

    result = services.batch_evaluate(batch=batch, actor="worker", now=now)

    assert result.verdict == SoakResult.Verdict.FAIL
    delivery = Delivery.objects.get(event=Event.GRAY_BATCH_FAILED)
    assert delivery.key == f"batch:{batch.pk}:failed" and delivery.subscription == staff_inbox
    assert delivery.payload["message"] == "Gray batch hot failed its soak (lot 7)."


def test_a_pending_result_that_turns_into_a_failure_notifies(fleet, criteria, now, staff_inbox):
    start = now - timedelta(hours=3)
    batch = hot_batch(fleet, criteria, start)
    pending = services.batch_evaluate(batch=batch, actor="worker", now=start + timedelta(minutes=5))
    assert pending.verdict == SoakResult.Verdict.PENDING
    assert not Delivery.objects.exists()
    ingest_soak([fleet["gpu-02"]], start=start, end=now - timedelta(minutes=2), temp=88.0, now=now)

    failed = services.batch_evaluate(batch=batch, actor="worker", now=now)

    assert failed.pk == pending.pk and failed.verdict == SoakResult.Verdict.FAIL  # updated in place
    assert Delivery.objects.filter(event=Event.GRAY_BATCH_FAILED, key=f"batch:{batch.pk}:failed").count() == 1
