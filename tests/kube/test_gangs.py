"""Gangs across nodes: one pinned object per replica, pushed, reconciled and removed as one job — on
the fake Kubernetes API server through the official client."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apps.catalog.models import ComputeCoefficient, DeviceModel
from apps.clusters.models import PushAction
from apps.clusters.pusher import push_due_streams
from apps.inventory.models import Cluster, Pool
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.lifecycle import job_cancel, job_preempt, job_submit
from apps.scheduling.push import push_job_run, push_stream_run
from apps.scheduling.reconcile import reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run
from tests.kube.fake_apiserver import kubeconfig_for
from tests.kube.helpers import nvidia_node

pytestmark = pytest.mark.django_db


NODES = ("hgx-01", "hgx-02", "hgx-03")  # a third node takes the retry (the failed one is avoided)


@pytest.fixture
def h100(db):
    model = DeviceModel.objects.create(
        vendor="nvidia",
        kind="gpu",
        name="H100 80GB SXM5",
        slug="h100-80gb-sxm5",
        memory_mib=81559,
        bf16_dense_tflops=989,
        fp16_dense_tflops=989,
        features=["nvlink"],
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("3.0000"), effective_from="2024-01-01"
    )
    return model


@pytest.fixture
def hgx(h100, server, tmp_path):
    """Three 8-card nodes in one cluster reached through the fake API server."""
    cluster = Cluster.objects.create(
        name="HGX",
        slug="hgx",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(kubeconfig_for(server, tmp_path)),
    )
    pool = Pool.objects.create(cluster=cluster, name="training", slug="training")
    for name in NODES:
        nvidia_node(cluster, pool, name, h100, 8, uuid="GPU-{node}-{i}")
        server.add_node(name)
    return cluster


def gang(project, user, h100, **extra):
    fields = dict(
        name="llm",
        image="pytorch:2.3",
        request_kind="whole_cards",
        device_model=h100,
        count=8,
        replicas=2,
        max_retries=1,
        expected_duration_s=3600,
    )
    fields.update(extra)
    job = job_submit(project=project, actor=user, **fields)
    assert job.pk in scheduling_cycle_run().placed_job_ids
    summary = push_job_run(job_id=job.pk)
    assert summary["failed"] == 0, summary
    job.refresh_from_db()
    return job


def live_jobs(server, job):
    return sorted(
        (o for o in server.objects("Job") if o["metadata"]["labels"].get("suanchi.io/job") == str(job.pk)),
        key=lambda o: o["metadata"]["name"],
    )


def pods_of(server, job):
    return sorted(
        (
            p
            for p in server.objects("Pod")
            if p["metadata"]["labels"].get("suanchi.io/job") == str(job.pk)
            and not p["metadata"].get("deletionTimestamp")
        ),
        key=lambda p: p["metadata"]["labels"]["suanchi.io/replica"],
    )


def push_everything():
    for stream in push_due_streams():
        push_stream_run(stream=stream)


def test_a_two_node_gang_is_two_pinned_replicas_that_run_and_fail_as_one(hgx, server, member_project, h100):
    user, project = member_project
    job = gang(project, user, h100)
    allocations = Allocation.objects.filter(job=job, released_at__isnull=True)
    assert allocations.count() == 16
    by_replica = {r: {a.node.name for a in allocations if a.replica == r} for r in (0, 1)}
    assert all(len(nodes) == 1 for nodes in by_replica.values())  # a replica is on one node …
    assert by_replica[0] != by_replica[1]  # … and the two are on different nodes

    # Two Jobs (one per replica), each pinned to its replica's node, and the rendezvous Service.
    jobs = live_jobs(server, job)
    assert [o["metadata"]["name"] for o in jobs] == [f"suanchi-{job.pk}-a0-r0", f"suanchi-{job.pk}-a0-r1"]
    (service,) = [s for s in server.objects("Service") if s["metadata"]["name"] == f"suanchi-{job.pk}-a0"]
    assert service["spec"]["clusterIP"] == "None"
    pods = pods_of(server, job)
    assert len(pods) == 2
    for rank, pod in enumerate(pods):
        (node,) = by_replica[int(pod["metadata"]["labels"]["suanchi.io/replica"])]
        assert pod["spec"]["nodeName"] == node  # bound by the (fake) scheduler from the nodeSelector
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == f"r0.suanchi-{job.pk}-a0.{pod['metadata']['namespace']}.svc"
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
        assert not {k for k in env if k.endswith("VISIBLE_DEVICES")}

    # Half the gang up is not running yet; both up is.
    ns = pods[0]["metadata"]["namespace"]
    server.set_pod_phase(ns, pods[0]["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=hgx).running == 0
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    server.set_pod_phase(ns, pods[1]["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=hgx).running == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    # One replica fails: the whole job takes its retry, and every replica's objects go.
    server.set_pod_phase(ns, pods[1]["metadata"]["name"], "Failed", exit_code=1, reason="Error")
    assert reconcile_cluster(cluster=hgx).retried == 1
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempt == 1
    push_everything()
    assert live_jobs(server, job) == []
    assert [
        s for s in server.objects("Service") if s["metadata"]["name"].startswith(f"suanchi-{job.pk}-")
    ] == []
    deletes = PushAction.objects.filter(job=job, attempt=0, verb=PushAction.Verb.DELETE)
    assert sorted(deletes.values_list("kind", flat=True)) == ["Job", "Job", "Service"]

    # The next attempt runs to the end as one job: succeeded only when both replicas are.
    # The cards are released once Kubernetes confirms the pods gone (graceful termination, 30 s).
    server.advance(30)
    reconcile_cluster(cluster=hgx)
    assert not Allocation.objects.filter(job=job, attempt=0, released_at__isnull=True).exists()

    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    assert job.pk in scheduling_cycle_run().placed_job_ids
    push_job_run(job_id=job.pk)
    pods = pods_of(server, job)
    assert [p["metadata"]["labels"]["suanchi.io/attempt"] for p in pods] == ["1", "1"]
    for pod in pods:
        server.set_pod_phase(ns, pod["metadata"]["name"], "Running")
    server.set_pod_phase(ns, pods[0]["metadata"]["name"], "Succeeded")
    reconcile_cluster(cluster=hgx)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING  # one replica done is not the job
    server.set_pod_phase(ns, pods[1]["metadata"]["name"], "Succeeded")
    assert reconcile_cluster(cluster=hgx).succeeded == 1
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED


@pytest.mark.parametrize("how", ["cancel", "preempt"])
def test_cancel_and_preemption_remove_every_replica(hgx, server, member_project, h100, how):
    user, project = member_project
    job = gang(project, user, h100)
    assert len(live_jobs(server, job)) == 2
    if how == "cancel":
        job_cancel(job=job, actor=user, reason="no longer needed")
    else:
        assert job_preempt(job=job, reason="a higher-priority gang", actor="scheduler")
    push_everything()
    assert live_jobs(server, job) == []
    assert not [
        s for s in server.objects("Service") if s["metadata"]["name"].startswith(f"suanchi-{job.pk}-")
    ]


def test_a_replica_deleted_behind_our_back_fails_the_whole_gang(hgx, server, member_project, h100):
    user, project = member_project
    job = gang(project, user, h100, max_retries=0)
    first = live_jobs(server, job)[1]
    from apps.clusters.connections import backend_for

    backend = backend_for(hgx)
    try:
        assert backend.delete("Job", first["metadata"]["namespace"], first["metadata"]["name"])
    finally:
        backend.close()
    assert reconcile_cluster(cluster=hgx).failed == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "deleted outside Suanchi" in job.state_reason
