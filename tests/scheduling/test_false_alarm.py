"""Issue 27 §7: a false alarm strands services. Quarantining a node (a suspected fault, later
released) must take only what runs there — an inference service spread over nodes keeps its other
replicas running — and must not mark the node as failed for the jobs it moved: once the node is
released, they are re-examined at once and may run there again. Against the fake API server through
the official client."""

from __future__ import annotations

import pytest

from apps.clusters.manifests import LABEL_JOB
from apps.inventory.models import Node
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.scheduling.faults import node_status_change
from apps.scheduling.reconcile import reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run
from tests.kube import helpers as kube_helpers
from tests.kube.test_reconcile import pods_for, push_everything, schedule_and_push, submit, workload

kube_cluster = kube_helpers.kube_cluster  # the fixtures of tests/kube (tests/kube/helpers.py)
server = kube_helpers.server

pytestmark = pytest.mark.django_db


def _quarantine(name, reason="suspected PSU fault"):
    node_status_change(
        node=Node.objects.get(name=name), status=Node.Status.QUARANTINED, reason=reason, actor="ops"
    )


def _release(name):
    node_status_change(
        node=Node.objects.get(name=name), status=Node.Status.READY, reason="false alarm", actor="ops"
    )


def _service_pods(server, job):
    return [p for p in server.objects("Pod") if p["metadata"]["labels"].get(LABEL_JOB) == str(job.pk)]


def _live_pods(server, job):
    return {
        p["spec"]["nodeSelector"]["kubernetes.io/hostname"]: p
        for p in _service_pods(server, job)
        if not p["metadata"].get("deletionTimestamp")
    }


def _held(job):
    return Allocation.objects.filter(job=job, released_at__isnull=True, releasing_since__isnull=True)


def _run_all(server, job):
    for pod in _service_pods(server, job):
        if not pod["metadata"].get("deletionTimestamp"):
            server.set_pod_phase(pod["metadata"]["namespace"], pod["metadata"]["name"], "Running")


def test_a_quarantine_takes_only_the_service_replicas_on_that_node_and_its_release_gives_them_back(
    kube_cluster, server, member_project, a100
):
    user, project = member_project
    # Two replicas of three cards each: one per node (four cards a node).
    service = schedule_and_push(
        submit(project, user, a100, name="chat", kind="inference", replicas=2, count=3)
    )
    nodes = set(_held(service).values_list("node__name", flat=True))
    assert nodes == {"gpu-01", "gpu-02"}
    _run_all(server, service)
    assert reconcile_cluster(cluster=kube_cluster).running == 1
    healthy = _live_pods(server, service)["gpu-02"]
    healthy_cards = set(_held(service).filter(node__name="gpu-02").values_list("device_id", flat=True))

    _quarantine("gpu-01")
    push_everything()  # the taint lands, gpu-01's Deployment is deleted, gpu-02's applied unchanged
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.retried == result.failed == 0, result
    service.refresh_from_db()
    assert service.state == JobState.RUNNING and service.attempt == 0, service.state_reason
    assert service.excluded_nodes == []
    # The healthy node's replica: the same pod, still running, its cards still allocated.
    live = _live_pods(server, service)
    assert set(live) == {"gpu-02"}
    assert live["gpu-02"]["metadata"]["uid"] == healthy["metadata"]["uid"]
    assert live["gpu-02"]["status"]["phase"] == "Running"
    assert set(_held(service).values_list("device_id", flat=True)) == healthy_cards
    assert service.replicas == 1
    lost = service.events.filter(kind=JobEvent.Kind.SCALED, data__lost_on=["gpu-01"]).get()
    assert "gpu-01" in lost.message and lost.data["target"] == 2
    # The evicted replica's cards are freed once its pod is gone, never before.
    server.advance(31)
    assert reconcile_cluster(cluster=kube_cluster).retried == 0
    assert not Allocation.objects.filter(job=service, node__name="gpu-01", released_at__isnull=True).exists()

    _release("gpu-01")
    push_everything()
    service.refresh_from_db()
    assert service.replicas == 2
    assert set(_held(service).values_list("node__name", flat=True)) == {"gpu-01", "gpu-02"}
    _run_all(server, service)
    live = _live_pods(server, service)
    assert set(live) == {"gpu-01", "gpu-02"}
    assert live["gpu-02"]["metadata"]["uid"] == healthy["metadata"]["uid"]  # never restarted
    assert reconcile_cluster(cluster=kube_cluster).retried == 0
    service.refresh_from_db()
    assert service.state == JobState.RUNNING and service.attempt == 0


def test_a_service_moved_off_a_quarantined_node_runs_there_again_once_it_is_released(
    kube_cluster, server, member_project, a100
):
    """The demo: after "Release from quarantine" the services stayed pending for good, each retry
    avoiding the node where "an earlier attempt failed" — the quarantine, not the job, ended it."""
    user, project = member_project
    service = schedule_and_push(submit(project, user, a100, name="embed", kind="inference", count=4))
    node = _held(service).values_list("node__name", flat=True).first()
    other = "gpu-02" if node == "gpu-01" else "gpu-01"
    filler = schedule_and_push(submit(project, user, a100, name="fill", count=4))  # the other node
    assert _held(filler).values_list("node__name", flat=True).first() == other
    _run_all(server, service)
    reconcile_cluster(cluster=kube_cluster)

    _quarantine(node)
    push_everything()
    service.refresh_from_db()
    assert service.state == JobState.PENDING
    assert service.excluded_nodes == []  # not a failure of the job on that node
    retry = service.events.filter(kind=JobEvent.Kind.RETRY).get()
    assert retry.data["ended_on"] == [node] and retry.data["excluded_nodes"] == []
    server.advance(31)
    reconcile_cluster(cluster=kube_cluster)
    assert not Allocation.objects.filter(job=service, released_at__isnull=True).exists()
    # Nowhere to go while the node is quarantined: parked by the queueing hints.
    assert service.pk not in scheduling_cycle_run().placed_job_ids
    assert scheduling_cycle_run().parked >= 1

    _release(node)
    push_everything()
    result = scheduling_cycle_run()  # the next cycle, at once
    assert service.pk in result.placed_job_ids, result.as_dict()
    service.refresh_from_db()
    assert service.state == JobState.SCHEDULED
    assert set(_held(service).values_list("node__name", flat=True)) == {node}


def test_the_release_wakes_the_parked_jobs_that_ended_there(kube_cluster, server, member_project, a100):
    """The queueing hints keep a parked job parked until something it could use changes; releasing
    the node touches the jobs whose attempt ended there, so the very next cycle re-examines them
    (a job's changed row wakes it, whatever the snapshot diff saw)."""
    import time

    from apps.scheduling.services import _micros, unschedulable_queue

    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, name="batch", count=4))
    node = _held(job).values_list("node__name", flat=True).first()
    schedule_and_push(submit(project, user, a100, name="fill", count=4))  # the other node
    _quarantine(node)
    push_everything()
    server.advance(31)
    reconcile_cluster(cluster=kube_cluster)
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    hints = unschedulable_queue()
    job.refresh_from_db()
    assert hints.waiting(job.pk, _micros(job.updated_at), time.monotonic())  # parked

    _release(node)
    job.refresh_from_db()
    assert not hints.waiting(job.pk, _micros(job.updated_at), time.monotonic())  # woken at once
    assert job.pk in scheduling_cycle_run().placed_job_ids


def test_an_eviction_does_not_mark_the_node_as_failed_but_a_failed_pod_does(
    kube_cluster, server, member_project, a100
):
    from kubernetes import client, config

    user, project = member_project
    evicted = schedule_and_push(submit(project, user, a100, name="evicted", max_retries=1))
    node = _held(evicted).values_list("node__name", flat=True).first()
    api = client.CoreV1Api(config.new_client_from_config(kube_cluster.kubeconfig_path))
    api.patch_node(node, {"spec": {"taints": [{"key": "example.com/drain", "effect": "NoExecute"}]}})
    assert reconcile_cluster(cluster=kube_cluster).retried == 1
    evicted.refresh_from_db()
    assert evicted.excluded_nodes == []
    assert evicted.events.filter(kind=JobEvent.Kind.RETRY).get().data["ended_on"] == [node]
    # Kept off the node while the taint is there: the ledger took the taint in (as a sync would).
    taints = Node.objects.get(name=node).taints
    assert ("example.com/drain", "NoExecute") in [(t.get("key"), t.get("effect")) for t in taints]

    # A pod that failed by itself (the job's own failure): its node is avoided by the next attempt.
    Job.objects.filter(pk=evicted.pk).update(retry_not_before=None)
    failing = schedule_and_push(submit(project, user, a100, name="failing", max_retries=1))
    where = _held(failing).values_list("node__name", flat=True).first()
    assert where != node
    w = workload(failing)
    (pod,) = pods_for(server, w)
    server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Failed", exit_code=1, reason="Error")
    assert reconcile_cluster(cluster=kube_cluster).retried == 1
    failing.refresh_from_db()
    assert failing.excluded_nodes == [where]
