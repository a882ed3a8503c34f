"""Reconcile, retries from checkpoint, node quarantine and preemption — on the simulated backend and
against the fake Kubernetes API server through the real client."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone

from apps.clusters.connections import backend_for
from apps.clusters.models import PushAction
from apps.clusters.outbox import node_patch_enqueue
from apps.clusters.pusher import push_due_streams
from apps.inventory.models import Cluster, Device, DeviceEvent, Node
from apps.inventory.services.labels import node_labels_apply
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.scheduling.lifecycle import job_cancel, job_preempt, job_submit
from apps.scheduling.push import push_job_run, push_stream_run
from apps.scheduling.reconcile import classify_pod_failure, reconcile_all, reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run

pytestmark = pytest.mark.django_db


def submit(project, user, a100, **extra):
    fields = {
        "name": "train",
        "image": "pytorch:2.3",
        "request_kind": "whole_cards",
        "device_model": a100,
        "count": 1,
        "expected_duration_s": 600,
    }
    fields.update(extra)
    return job_submit(project=project, actor=user, **fields)


def schedule_and_push(job):
    result = scheduling_cycle_run()
    assert job.pk in result.placed_job_ids, result.as_dict()
    summary = push_job_run(job_id=job.pk)
    assert summary["failed"] == 0, summary
    job.refresh_from_db()
    return job


def push_everything():
    for stream in push_due_streams():
        push_stream_run(stream=stream)


def workload(job):
    return (
        PushAction.objects.filter(job=job, attempt=job.attempt, kind__in=["Job", "Deployment"])
        .order_by("seq")
        .first()
    )


def node_of(job):
    return (
        Allocation.objects.filter(job=job, attempt=job.attempt).values_list("node__name", flat=True).first()
    )


def env_of(obj):
    containers = obj["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in containers[0].get("env", [])}


# -- simulated backend ------------------------------------------------------------------------------


def test_simulated_job_runs_to_success_and_releases_its_cards(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100))
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    w = workload(job)
    assert backend.get("Job", w.namespace, w.name) is not None

    backend.advance(6)  # pods leave Pending after 1-5 simulated seconds
    assert reconcile_cluster(cluster=cluster).running == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.started_at is not None
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 1

    backend.advance(700)  # the expected 600 s (× 0.9-1.1) have passed
    result = reconcile_cluster(cluster=cluster)
    assert result.succeeded == 1
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.finished_at is not None
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    transitions = list(
        job.events.filter(kind=JobEvent.Kind.STATE).order_by("id").values_list("to_state", flat=True)
    )
    assert transitions == [JobState.SCHEDULED, JobState.RUNNING, JobState.SUCCEEDED]
    # A second pass changes nothing.
    assert reconcile_all() == []


def test_the_simulated_cluster_is_shared_between_backend_instances(fleet, member_project, a100):
    """Web, worker and beat are separate processes in the demo: each builds its own backend object."""
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100))
    cluster = Cluster.objects.get(slug="prod")
    w = workload(job)
    other = backend_for(Cluster.objects.get(pk=cluster.pk))
    assert other is not backend_for(cluster)
    assert other.get("Job", w.namespace, w.name)["metadata"]["name"] == w.name
    pods = other.pods_of(w.namespace, w.name)
    assert len(pods) == 1 and pods[0]["metadata"]["labels"]["suanchi.io/job"] == str(job.pk)


def test_failed_pod_retries_from_checkpoint_on_another_node(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=2, checkpoint_dir="/ckpt/train"))
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    first_node = node_of(job)
    w0 = workload(job)
    backend.advance(6)
    reconcile_cluster(cluster=cluster)
    backend.inject_failure(w0.namespace, w0.name, reason="Error", exit_code=137)

    result = reconcile_cluster(cluster=cluster)
    assert result.retried == 1 and not result.quarantined
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempt == 1
    assert job.excluded_nodes == [first_node]
    assert job.resume_from == "/ckpt/train"
    assert job.retry_not_before > timezone.now() + dt.timedelta(seconds=50)  # 60 s backoff
    assert "exit code 137" in job.state_reason
    assert not Allocation.objects.filter(
        job=job, released_at__isnull=True, releasing_since__isnull=True
    ).exists()
    retry = job.events.get(kind=JobEvent.Kind.RETRY)
    assert retry.data["excluded_nodes"] == [first_node]

    # The failed attempt's Job is deleted through the outbox.
    push_job_run(job_id=job.pk)
    assert backend.get("Job", w0.namespace, w0.name) is None

    # During the backoff the job is not considered; afterwards it lands elsewhere and resumes.
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    Job.objects.filter(pk=job.pk).update(retry_not_before=timezone.now() - dt.timedelta(seconds=1))
    job = schedule_and_push(job)
    assert node_of(job) != first_node
    w1 = workload(job)
    assert w1.name.endswith("-a1")
    live = backend.get("Job", w1.namespace, w1.name)
    env = env_of(live)
    assert env["SUANCHI_RESUME_FROM"] == "/ckpt/train" and env["SUANCHI_ATTEMPT"] == "1"


def test_retries_used_up_fail_the_job(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=0))
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    w = workload(job)
    backend.advance(6)
    backend.inject_failure(w.namespace, w.name, reason="OOMKilled", exit_code=137)
    result = reconcile_cluster(cluster=cluster)
    assert result.failed == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "OOMKilled" in job.state_reason
    assert job.failure_class == "out_of_memory"
    assert not Allocation.objects.filter(
        job=job, released_at__isnull=True, releasing_since__isnull=True
    ).exists()


def test_an_object_deleted_behind_our_back_fails_the_attempt(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=0))
    cluster = Cluster.objects.get(slug="prod")
    w = workload(job)
    backend_for(cluster).delete("Job", w.namespace, w.name)  # kubectl delete, by someone else
    assert reconcile_cluster(cluster=cluster).failed == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert f"Job {w.namespace}/{w.name} was deleted outside Suanchi" in job.state_reason


def test_a_job_not_yet_pushed_is_left_alone(fleet, member_project, a100):
    user, project = member_project
    job = submit(project, user, a100)
    assert job.pk in scheduling_cycle_run().placed_job_ids  # scheduled, push still pending
    result = reconcile_cluster(cluster=Cluster.objects.get(slug="prod"))
    assert result.checked == 1 and result.failed == result.retried == 0
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED


def test_hardware_fault_cordons_the_card_not_the_node(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=0, checkpoint_dir="/ckpt/x"))
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    node_name = node_of(job)
    w = workload(job)
    backend.advance(6)
    backend.inject_failure(w.namespace, w.name, reason="DeviceLost", exit_code=255)

    card = Allocation.objects.get(job=job).device
    result = reconcile_cluster(cluster=cluster)
    # A hardware fault does not use up the job's retries (max_retries=0, still retried); one card's
    # fault cordons that card (faults.py: proportion), the node keeps its other jobs.
    assert result.retried == 1 and result.quarantined == []
    node = Node.objects.get(name=node_name)
    assert node.status == Node.Status.READY
    card.refresh_from_db()
    assert card.cordoned and card.events.filter(kind=DeviceEvent.Kind.CORDON).exists()
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.excluded_nodes == [node_name]
    assert job.failure_class == "device_lost"

    push_everything()
    live = backend.get("Node", None, node_name)
    assert {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"} not in (
        live.get("spec") or {}
    ).get("taints", [])
    # The failed attempt's node is avoided.
    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    job = schedule_and_push(job)
    assert node_of(job) != node_name


def test_a_lost_card_reschedules_its_job_and_cordons_the_card(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=0))
    cluster = Cluster.objects.get(slug="prod")
    allocation = Allocation.objects.get(job=job)
    Device.objects.filter(pk=allocation.device_id).update(health=Device.Health.LOST)
    result = reconcile_cluster(cluster=cluster)
    assert result.retried == 1 and result.quarantined == []
    assert Device.objects.get(pk=allocation.device_id).cordoned
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert "a card it used was lost" in job.state_reason


def test_classify_pod_failure_tells_hardware_from_workload():
    def pod(reason, message=""):
        term = {"exitCode": 1, "reason": reason}
        if message:
            term["message"] = message
        return {
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"name": "main", "state": {"terminated": term}}],
            }
        }

    assert classify_pod_failure(pod("Error"))[1] == ""
    assert classify_pod_failure(pod("OOMKilled"))[1] == "out_of_memory"
    assert (
        classify_pod_failure(pod("Error", "CUDA error: Xid 79, GPU has fallen off the bus"))[1]
        == "device_lost"
    )
    assert classify_pod_failure(pod("UnexpectedAdmissionError"))[1] == "device_lost"
    assert (
        classify_pod_failure(pod("Error", "CUDA driver version is insufficient for CUDA runtime version"))[1]
        == "runtime_mismatch"
    )
    assert classify_pod_failure(pod("Error", "RuntimeError: No CUDA-capable device is detected"))[1] == (
        "device_not_visible"
    )
    text, key = classify_pod_failure(pod("DeviceLost"))
    assert key == "device_lost" and "main: DeviceLost, exit code 1" in text


def test_preemption_deletes_objects_and_requeues_with_resume(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, checkpoint_dir="/ckpt/p"))
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    w = workload(job)
    assert job_preempt(job=job, reason="a critical job needs the card", actor="scheduler")
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempt == 1 and job.resume_from == "/ckpt/p"
    states = list(job.events.filter(kind=JobEvent.Kind.STATE).values_list("to_state", flat=True))
    assert states[-2:] == [JobState.PREEMPTED, JobState.PENDING]
    assert job.events.filter(kind=JobEvent.Kind.PREEMPTED).exists()
    assert not Allocation.objects.filter(
        job=job, released_at__isnull=True, releasing_since__isnull=True
    ).exists()
    deletes = PushAction.objects.filter(job=job, verb=PushAction.Verb.DELETE)
    assert [d.kind for d in deletes] == ["Job"]
    push_job_run(job_id=job.pk)
    assert backend.get("Job", w.namespace, w.name) is None
    # Preempting again is a no-op: it is no longer running.
    assert job_preempt(job=job, reason="again", actor="scheduler") is False


def test_cancel_deletes_the_workload(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100))
    cluster = Cluster.objects.get(slug="prod")
    w = workload(job)
    job_cancel(job=job, actor=user)
    push_job_run(job_id=job.pk)
    assert backend_for(cluster).get("Job", w.namespace, w.name) is None


def test_node_labels_reach_the_cluster_through_the_outbox(fleet):
    node = Node.objects.get(name="gpu-01")
    assert node_labels_apply(node=node, actor="ledger")  # True: they changed, the caller queues them
    node_patch_enqueue(node)
    action = PushAction.objects.get(kind="Node", name="gpu-01")
    assert action.job_id is None and action.verb == PushAction.Verb.PATCH
    push_stream_run(stream=action.stream)
    live = backend_for(node.cluster).get("Node", None, "gpu-01")
    node.refresh_from_db()
    assert live["metadata"]["labels"]["suanchi.io/cluster"] == "prod"
    for key, value in node.labels.items():
        assert live["metadata"]["labels"][key] == value


# -- the same flows against the fake API server, through the official client -----------------------


# ``server`` and ``kube_cluster``: tests/kube/conftest.py (tests/kube/helpers.py).


def pods_for(server, w):
    return [
        p for p in server.objects("Pod", w.namespace) if p["metadata"]["labels"].get("job-name") == w.name
    ]


def test_fake_api_server_flow_with_retry_from_checkpoint(kube_cluster, server, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=1, checkpoint_dir="/ckpt/k"))
    w0 = workload(job)
    first_node = node_of(job)
    (pod,) = pods_for(server, w0)
    server.set_pod_phase(w0.namespace, pod["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=kube_cluster).running == 1

    server.set_pod_phase(w0.namespace, pod["metadata"]["name"], "Failed", exit_code=1, reason="Error")
    assert reconcile_cluster(cluster=kube_cluster).retried == 1
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempt == 1
    push_job_run(job_id=job.pk)
    assert [o["metadata"]["name"] for o in server.objects("Job", w0.namespace)] == []

    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    job = schedule_and_push(job)
    assert node_of(job) != first_node
    w1 = workload(job)
    (live,) = server.objects("Job", w1.namespace)
    assert live["metadata"]["name"] == w1.name
    assert env_of(live)["SUANCHI_RESUME_FROM"] == "/ckpt/k"
    (pod,) = pods_for(server, w1)
    server.set_pod_phase(w1.namespace, pod["metadata"]["name"], "Running")
    server.set_pod_phase(w1.namespace, pod["metadata"]["name"], "Succeeded")
    assert reconcile_cluster(cluster=kube_cluster).succeeded == 1
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED


def test_fake_api_server_node_not_ready_and_quarantine(kube_cluster, server, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=0))
    node_name = node_of(job)
    server.set_node_ready(node_name, False)
    result = reconcile_cluster(cluster=kube_cluster)
    # NotReady alone reschedules (without using a retry) but is not a confirmed hardware fault.
    assert result.retried == 1 and result.quarantined == []
    node = Node.objects.get(name=node_name)
    assert node.events.filter(kind=DeviceEvent.Kind.NOT_READY).count() == 1
    reconcile_cluster(cluster=kube_cluster)
    assert node.events.filter(kind=DeviceEvent.Kind.NOT_READY).count() == 1  # one per episode

    # A confirmed fault on the next attempt quarantines its node; the taint lands on the Node.
    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    job = schedule_and_push(job)
    second = node_of(job)
    assert second != node_name
    w = workload(job)
    (pod,) = pods_for(server, w)
    card = Allocation.objects.get(job=job, attempt=job.attempt).device
    server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Failed", exit_code=1, reason="DeviceLost")
    assert reconcile_cluster(cluster=kube_cluster).quarantined == []  # one card: cordoned, not the node
    card.refresh_from_db()
    assert card.cordoned
    push_everything()
    (live,) = [n for n in server.objects("Node") if n["metadata"]["name"] == second]
    assert {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"} not in (
        live.get("spec") or {}
    ).get("taints", [])


def test_reconcile_survives_an_api_outage(kube_cluster, server, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100))
    server.inject(r"/pods", status=500, times=1)
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.errors and "500" in result.errors[0]
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED  # nothing concluded from a failed read
    assert reconcile_cluster(cluster=kube_cluster).errors == []


def test_a_push_landing_during_the_cluster_read_is_not_taken_for_a_deletion(fleet, member_project, a100):
    """The reconciler reads what was applied before it lists the cluster; a push that completes in
    between (another worker) is seen next pass, never mistaken for a deletion."""
    from unittest import mock

    from apps.scheduling import reconcile

    user, project = member_project
    job = submit(project, user, a100)
    assert job.pk in scheduling_cycle_run().placed_job_ids  # scheduled, not pushed yet
    cluster = Cluster.objects.get(slug="prod")
    real = reconcile.backend_for

    def listing_then_push(c):
        backend = real(c)
        original = backend.list_owned

        def list_owned(kind, *args, **kwargs):
            items = original(kind, *args, **kwargs)
            if kind == "Pod":  # after the workloads were listed, the push lands
                push_job_run(job_id=job.pk)
            return items

        backend.list_owned = list_owned
        return backend

    with mock.patch.object(reconcile, "backend_for", listing_then_push):
        result = reconcile_cluster(cluster=cluster)
    assert result.failed == result.retried == 0
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    backend_for(cluster).advance(6)
    assert reconcile_cluster(cluster=cluster).running == 1


def test_a_foreign_noexecute_taint_evicts_both_jobs_and_both_retry_elsewhere(
    kube_cluster, server, member_project, a100
):
    """Two jobs on one node; an operator taints the node NoExecute (kubectl taint, not Suanchi). The
    taint-eviction controller evicts both pods: both go to the other node, keeping their retries
    and the Kubernetes reason. (Suanchi's own quarantine retries them first: tests/kube/
    test_quarantine.py.)"""
    from kubernetes import client, config

    user, project = member_project
    first = schedule_and_push(submit(project, user, a100, name="a", max_retries=0))
    second = schedule_and_push(submit(project, user, a100, name="b", max_retries=0))
    node = node_of(first)
    assert node_of(second) == node  # binpacked on one node
    for job in (first, second):
        (pod,) = pods_for(server, workload(job))
        server.set_pod_phase(workload(job).namespace, pod["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=kube_cluster).running == 2

    api = client.CoreV1Api(config.new_client_from_config(kube_cluster.kubeconfig_path))
    taints = [*(api.read_node(node).to_dict()["spec"].get("taints") or [])]
    taints = [{k: v for k, v in t.items() if v is not None and k != "time_added"} for t in taints]
    api.patch_node(node, {"spec": {"taints": [*taints, {"key": "example.com/psu", "effect": "NoExecute"}]}})
    for job in (first, second):
        (pod,) = pods_for(server, workload(job))
        assert [c["reason"] for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
            "DeletionByTaintManager"
        ]
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.retried == 2 and result.failed == 0
    for job in (first, second):
        job.refresh_from_db()
        assert job.state == JobState.PENDING and job.attempt == 1  # max_retries=0: not counted
        event = job.events.filter(kind=JobEvent.Kind.RETRY).latest("pk")
        assert "DeletionByTaintManager" in event.message and node in event.message

    Job.objects.filter(pk__in=[first.pk, second.pk]).update(retry_not_before=None)
    result = scheduling_cycle_run()
    assert {first.pk, second.pk} <= set(result.placed_job_ids)
    for job in (first, second):
        job.refresh_from_db()
        assert node_of(job) != node


def test_terminating_pods_of_a_deleted_attempt_are_not_a_failure(kube_cluster, server, member_project, a100):
    """A retried attempt's Job is deleted with Background propagation: its pod lingers Terminating,
    then Failed (exit 137) before it is removed — never taken for a failure of the next attempt."""
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=2))
    w0 = workload(job)
    (pod,) = pods_for(server, w0)
    server.set_pod_phase(w0.namespace, pod["metadata"]["name"], "Running")
    server.set_node_ready(node_of(job), False)
    assert reconcile_cluster(cluster=kube_cluster).retried == 1
    push_job_run(job_id=job.pk)
    assert server.objects("Job", w0.namespace) == []
    (old,) = pods_for(server, w0)
    assert old["metadata"]["deletionTimestamp"]  # Terminating, still labelled with the job
    server.set_node_ready(node_of(job), True)
    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    job = schedule_and_push(job)
    server.advance(30)  # the old pod ends Failed, still listed
    assert pods_for(server, w0)[0]["status"]["phase"] == "Failed"
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.retried == result.failed == 0
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED and job.attempt == 1


def test_foreign_taints_survive_every_label_push(kube_cluster, server):
    """Cordon, not-ready and operator taints on a Node are not the ledger's: label pushes and a
    quarantine leave them in place."""
    from apps.scheduling.faults import node_status_change

    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    operator = {"key": "nvidia.com/gpu-driver-upgrade", "value": "pending", "effect": "NoSchedule"}
    server.set_node_ready("gpu-01", False)
    with server._lock:
        server._store[("nodes", "", "gpu-01")]["spec"]["taints"] += [cordon, operator]
    node = Node.objects.get(name="gpu-01")
    node_labels_apply(node=node, actor="ledger")
    push_everything()
    node.refresh_from_db()
    node_status_change(node=node, status=Node.Status.QUARANTINED, reason="xid 79", actor="ops")
    push_everything()
    (live,) = [n for n in server.objects("Node") if n["metadata"]["name"] == "gpu-01"]
    keys = {(t["key"], t["effect"]) for t in live["spec"]["taints"]}
    assert {
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
        ("nvidia.com/gpu-driver-upgrade", "NoSchedule"),
        ("accelerator", "NoSchedule"),
        ("suanchi.io/quarantine", "NoExecute"),
    } <= keys
    assert live["metadata"]["labels"]["suanchi.io/cluster"] == "prod"


def test_a_two_replica_job_with_one_pod_succeeded_is_not_finished(kube_cluster, server, member_project, a100):
    """Issue 17 item 6, with per-replica objects (issue 18): a two-replica job is one batch/v1 Job
    per replica; it is done only when every replica's Job is (pkg/controller/job: SuccessCriteriaMet
    once ``succeeded >= completions``). One replica finishing early must neither finish the Suanchi
    job nor release its cards."""
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, replicas=2, count=1))
    w = workload(job)
    two = sorted(
        (
            p
            for p in server.objects("Pod", w.namespace)
            if p["metadata"]["labels"].get("suanchi.io/job") == str(job.pk)
        ),
        key=lambda p: p["metadata"]["labels"]["suanchi.io/replica"],
    )
    assert len(two) == 2
    assert {p["metadata"]["labels"]["job-name"] for p in two} == {
        f"suanchi-{job.pk}-a0-r0",
        f"suanchi-{job.pk}-a0-r1",
    }
    for pod in two:
        server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=kube_cluster).running == 1

    server.set_pod_phase(w.namespace, two[0]["metadata"]["name"], "Succeeded")
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.succeeded == result.failed == result.retried == 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 2
    live = {o["metadata"]["name"]: o for o in server.objects("Job", w.namespace)}
    assert live[f"suanchi-{job.pk}-a0-r0"]["status"]["succeeded"] == 1
    assert "conditions" not in live[f"suanchi-{job.pk}-a0-r1"]["status"]

    server.set_pod_phase(w.namespace, two[1]["metadata"]["name"], "Succeeded")
    assert reconcile_cluster(cluster=kube_cluster).succeeded == 1
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_an_over_quota_job_is_surfaced_then_ends_within_a_bounded_time(
    kube_cluster, server, member_project, a100
):
    """Issue 17 item 7: the namespace's ResourceQuota (here full because of a pod Suanchi does not
    own) makes kube-apiserver refuse the Job's pod (403 exceeded quota); the Job controller reports
    FailedCreate and the Job has no pods. Reconcile surfaces Kubernetes' message at once (job event,
    state reason) and ends the attempt after POD_CREATE_REFUSED_TIMEOUT_S (max_retries=0: failed)."""
    from apps.clusters.manifests import namespace_manifest, resource_quota_manifest
    from apps.scheduling.reconcile import POD_CREATE_REFUSED_TIMEOUT_S

    user, project = member_project
    backend = backend_for(kube_cluster)
    backend.apply(namespace_manifest(project))
    backend.apply(resource_quota_manifest(project, {"nvidia.com/gpu": 1}))
    ns = namespace_manifest(project)["metadata"]["name"]
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "notebook", "namespace": ns, "labels": {"app": "jupyter"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "jupyter", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    server._handle(
        "POST", f"/api/v1/namespaces/{ns}/pods", {}, json.dumps(foreign).encode(), "application/json"
    )

    job = schedule_and_push(submit(project, user, a100, max_retries=0))
    w = workload(job)
    assert pods_for(server, w) == []  # refused by the quota
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.refused == 1 and result.failed == result.retried == 0
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    event = job.events.get(kind=JobEvent.Kind.PENDING, data__kubernetes="FailedCreate")
    assert event.message == (
        f"Kubernetes refused the pods of Job {w.namespace}/{w.name}: exceeded quota: suanchi-quota, "
        "requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1"
    )
    assert job.state_reason == event.message
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 1

    server.advance(10)  # the Job controller tries again: refused again, same reason
    assert reconcile_cluster(cluster=kube_cluster).refused == 0  # nothing new to say
    assert job.events.filter(kind=JobEvent.Kind.PENDING, data__kubernetes="FailedCreate").count() == 1

    later = timezone.now() + dt.timedelta(seconds=POD_CREATE_REFUSED_TIMEOUT_S + 1)
    assert reconcile_cluster(cluster=kube_cluster, now=later).failed == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.failure_class == "pod_create_refused"
    assert "exceeded quota: suanchi-quota" in job.state_reason
    # Held until the delete of its Job is confirmed (no pod ever ran), then released.
    assert not Allocation.objects.filter(
        job=job, released_at__isnull=True, releasing_since__isnull=True
    ).exists()
    push_job_run(job_id=job.pk)
    reconcile_all()
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_scaling_a_deployment_1_to_2_triggers_no_retry_while_a_crash_loop_is_flagged(
    kube_cluster, server, member_project, a100
):
    """Issue 17 item 5: re-applying the service's Deployment (2 replicas, a new placement in its
    template) rolls out a new ReplicaSet; the old pod terminates (Failed, exit 137, still listed)
    — never a failure. A pod in CrashLoopBackOff past the threshold is flagged once; the service
    stays running with its cards."""
    from apps.clusters.manifests import LABEL_JOB
    from apps.scheduling.reconcile import CRASH_LOOP_RESTARTS
    from apps.scheduling.scaling import inference_scale

    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, kind="inference", replicas=1))
    w = workload(job)
    assert w.kind == "Deployment"

    def service_pods():
        return [
            p
            for p in server.objects("Pod", w.namespace)
            if p["metadata"]["labels"].get(LABEL_JOB) == str(job.pk)
        ]

    (first,) = service_pods()
    server.set_pod_phase(w.namespace, first["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=kube_cluster).running == 1

    assert inference_scale(job=job, replicas=2, actor=user) == 2
    assert push_job_run(job_id=job.pk)["failed"] == 0
    (live,) = server.objects("Deployment", w.namespace)
    assert live["spec"]["replicas"] == 2
    # A new template: a new ReplicaSet, held at 0 (Recreate) until the old pod is gone.
    assert [r["spec"]["replicas"] for r in server.objects("ReplicaSet", w.namespace)] == [0, 0]
    for seconds in (0, 30):  # Terminating, then Failed (exit 137) while still listed
        server.advance(seconds)
        result = reconcile_cluster(cluster=kube_cluster)
        assert result.retried == result.failed == 0, result
    server.advance(0)
    assert sorted(r["spec"]["replicas"] for r in server.objects("ReplicaSet", w.namespace)) == [0, 2]
    current = [p for p in service_pods() if not p["metadata"].get("deletionTimestamp")]
    assert len(current) == 2
    for pod in current:
        server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Running")
    server.set_pod_crash_loop(w.namespace, current[0]["metadata"]["name"], restarts=CRASH_LOOP_RESTARTS - 1)
    assert reconcile_cluster(cluster=kube_cluster).crash_looping == 0  # under the threshold
    server.set_pod_crash_loop(w.namespace, current[0]["metadata"]["name"], restarts=CRASH_LOOP_RESTARTS + 1)
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.crash_looping == 1 and result.retried == result.failed == 0
    assert reconcile_cluster(cluster=kube_cluster).crash_looping == 0  # flagged once
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempt == 0
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 2
    (flag,) = job.events.filter(kind=JobEvent.Kind.RETRY, data__kubernetes="CrashLoopBackOff")
    assert "CrashLoopBackOff" in flag.message and current[0]["metadata"]["name"] in flag.message
    assert flag.data["counted"] is False


def test_a_refused_event_list_does_not_stop_the_reconcile_pass(kube_cluster, server, member_project, a100):
    """Without RBAC for events (403), a podless Job is simply not explained this pass; the other
    jobs are still reconciled."""
    user, project = member_project
    waiting = schedule_and_push(submit(project, user, a100, name="podless"))
    running = schedule_and_push(submit(project, user, a100, name="runs"))
    for (plural, ns, name), obj in list(server._store.items()):
        if plural == "pods" and obj["metadata"]["labels"].get("job-name") == workload(waiting).name:
            server._store.pop((plural, ns, name))  # as if its pods were never created
    with server._lock:
        (live,) = [j for j in server._store.values() if j["metadata"].get("name") == workload(waiting).name]
        live["status"] = {}
    (pod,) = pods_for(server, workload(running))
    server.set_pod_phase(workload(running).namespace, pod["metadata"]["name"], "Running")
    server.inject(r"/events", status=403, times=1)
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.running == 1 and any("list events" in e and "403" in e for e in result.errors)
