"""Quarantine with proportion, against the fake API server through the official client.

A node's ``suanchi.io/quarantine=true:NoExecute`` taint makes the taint-eviction controller delete
every pod there that does not tolerate it, so only a node-level fault quarantines a node (then every
job there is retried elsewhere, one event each naming the cause); one card's fault cordons that card
and retries only its job."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apps.inventory.models import Device, DeviceEvent, Node
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.rollout import services as rollout
from apps.scheduling.faults import NODE_FAULT_INCIDENTS, device_fault_events, node_status_change
from apps.scheduling.reconcile import reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run
from tests.kube.test_reconcile import node_of, pods_for, push_everything, schedule_and_push, submit, workload

pytestmark = pytest.mark.django_db

QUARANTINE = {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"}


def two_running_jobs_on_one_node(server, kube_cluster, project, user, a100):
    first = schedule_and_push(submit(project, user, a100, name="infer-a", checkpoint_dir="/ckpt/a"))
    second = schedule_and_push(submit(project, user, a100, name="infer-b", checkpoint_dir="/ckpt/b"))
    node = node_of(first)
    assert node_of(second) == node  # binpacked
    for job in (first, second):
        w = workload(job)
        (pod,) = pods_for(server, w)
        server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=kube_cluster).running == 2
    return first, second, node


def live_taints(server, name):
    (node,) = [n for n in server.objects("Node") if n["metadata"]["name"] == name]
    return (node.get("spec") or {}).get("taints") or []


def assert_retried_elsewhere(jobs, node, cause):
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.PENDING and job.attempt == 1, job.state_reason
        # The quarantine, not the job, ended the attempt: not avoided once released (issue 27 §7).
        assert node not in job.excluded_nodes
        retry = job.events.filter(kind=JobEvent.Kind.RETRY)
        assert retry.count() == 1  # one event each
        assert cause in retry.get().message and f"node {node} quarantined (NoExecute)" in retry.get().message
        assert retry.get().data["counted"] is False  # the node, not the job, failed
        assert retry.get().data["ended_on"] == [node]
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(retry_not_before=None)
    placed = set(scheduling_cycle_run().placed_job_ids)
    assert {j.pk for j in jobs} <= placed
    for job in jobs:
        job.refresh_from_db()
        assert node_of(job) != node
        assert job.resume_from.startswith("/ckpt/")


def test_an_operator_quarantine_retries_both_jobs_on_the_node_elsewhere(
    kube_cluster, server, member_project, a100
):
    user, project = member_project
    first, second, node = two_running_jobs_on_one_node(server, kube_cluster, project, user, a100)
    node_status_change(
        node=Node.objects.get(name=node), status=Node.Status.QUARANTINED, reason="PSU alarm", actor="ops"
    )
    push_everything()  # the NoExecute taint reaches the Node; the attempts' Jobs are deleted
    assert QUARANTINE in live_taints(server, node)
    # The fake's taint manager evicts what is left; reconcile does not retry them a second time.
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.retried == result.failed == 0
    assert_retried_elsewhere([first, second], node, "PSU alarm")
    # Their old cards stay held until the evicted pods are gone.
    old = Allocation.objects.filter(job__in=[first, second], attempt=0)
    assert old.filter(released_at__isnull=True).count() == 2
    server.advance(31)
    reconcile_cluster(cluster=kube_cluster)
    assert not old.filter(released_at__isnull=True).exists()


def test_a_failed_gray_batch_does_not_leave_jobs_running_on_its_quarantined_node(
    kube_cluster, server, member_project, a100
):
    """The demo bug: a gray batch failed and pushed ``suanchi.io/quarantine=true:NoExecute``, and two
    inference jobs kept running there with active allocations and no event."""
    user, project = member_project
    first, second, node = two_running_jobs_on_one_node(server, kube_cluster, project, user, a100)
    criteria = rollout.soak_criteria_create(
        actor="ops",
        name="driver soak",
        min_days=1,
        max_error_events=0,
        max_temperature_c=Decimal("85"),
        max_throughput_drop_pct=Decimal("5"),
        max_lost_devices=0,
        min_telemetry_coverage_pct=Decimal("90"),
    )
    batch = rollout.batch_create(
        actor="ops",
        name="driver 560",
        slug="driver-560",
        kind="driver",
        target_version="560.35.03",
        criteria=criteria,
        nodes=[Node.objects.get(name=node)],
    )
    rollout.batch_soak_start(batch=batch, actor="ops")
    rollout.batch_fail(batch=batch, actor="ops", reason="throughput dropped 12 %")
    push_everything()
    assert QUARANTINE in live_taints(server, node)
    assert not Allocation.objects.filter(
        job__in=[first, second], released_at__isnull=True, releasing_since__isnull=True, node__name=node
    ).exists()
    assert_retried_elsewhere([first, second], node, "gray batch driver 560 failed")


def test_a_single_card_fault_retries_only_that_cards_job(kube_cluster, server, member_project, a100):
    user, project = member_project
    first, second, node = two_running_jobs_on_one_node(server, kube_cluster, project, user, a100)
    card = Allocation.objects.get(job=first).device
    w = workload(first)
    (pod,) = pods_for(server, w)
    server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Failed", exit_code=1, reason="DeviceLost")
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.retried == 1 and result.quarantined == []
    card.refresh_from_db()
    assert card.cordoned and "DeviceLost" in card.cordon_reason
    assert card.events.filter(kind=DeviceEvent.Kind.CORDON).exists()
    assert Node.objects.get(name=node).status == Node.Status.READY
    first.refresh_from_db()
    assert first.state == JobState.PENDING and first.failure_class == "device_lost"

    push_everything()  # no NoExecute taint: the other job's pod is not evicted
    assert QUARANTINE not in live_taints(server, node)
    (other,) = pods_for(server, workload(second))
    assert not other["metadata"].get("deletionTimestamp")
    assert not [c for c in other["status"].get("conditions", []) if c["type"] == "DisruptionTarget"]
    assert reconcile_cluster(cluster=kube_cluster).retried == 0
    second.refresh_from_db()
    assert second.state == JobState.RUNNING
    assert not second.events.filter(kind=JobEvent.Kind.RETRY).exists()
    assert Allocation.objects.filter(job=second, released_at__isnull=True).count() == 1

    # The cordoned card takes nothing new; the node's other cards do.
    Job.objects.filter(pk=first.pk).update(retry_not_before=None)
    third = schedule_and_push(submit(project, user, a100, name="infer-c", count=2))
    new = Allocation.objects.filter(
        job__in=[first, third], released_at__isnull=True, releasing_since__isnull=True
    )
    assert new.count() == 3 and card.pk not in set(new.values_list("device_id", flat=True))


def test_card_faults_on_separate_cards_of_one_node_quarantine_the_node(
    kube_cluster, server, member_project, a100
):
    user, project = member_project
    first, second, node = two_running_jobs_on_one_node(server, kube_cluster, project, user, a100)
    cards = [Allocation.objects.get(job=j).device for j in (first, second)]

    def critical(device, what):
        return DeviceEvent.objects.create(
            node=device.node,
            device=device,
            kind=DeviceEvent.Kind.HEALTH_CHANGED,
            severity=DeviceEvent.Severity.CRITICAL,
            message=f"telemetry: {what}",
        )

    assert device_fault_events([critical(cards[0], "XID 48")], actor="telemetry") == []
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == JobState.PENDING and second.state == JobState.RUNNING
    assert "XID 48" in first.events.get(kind=JobEvent.Kind.RETRY).message
    # A second card of the node fails on its own: a node-level fault.
    assert NODE_FAULT_INCIDENTS == 2
    assert device_fault_events([critical(cards[1], "uncorrectable ECC")], actor="telemetry") == [node]
    assert Node.objects.get(name=node).status == Node.Status.QUARANTINED
    second.refresh_from_db()
    assert second.state == JobState.PENDING
    assert "uncorrectable ECC" in second.events.get(kind=JobEvent.Kind.RETRY).message
    # Repeated events for a card already contained change nothing.
    assert device_fault_events([critical(cards[0], "XID 48")], actor="telemetry") == []
    assert Device.objects.filter(node__name=node, cordoned=True).count() == 2
