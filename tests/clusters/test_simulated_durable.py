"""The simulated cluster (what the demo runs on) behaves like a real one: deletion with termination
grace, NoExecute eviction of pods that do not tolerate a taint, Deployment rollouts (Recreate)."""

from __future__ import annotations

import pytest

from apps.clusters.backends.simulated_durable import FaithfulSimulatedBackend
from apps.clusters.connections import backend_for
from apps.inventory.models import Cluster, Node
from apps.jobs.models import Allocation, JobEvent, JobState
from apps.scheduling.faults import node_status_change
from apps.scheduling.lifecycle import job_cancel
from apps.scheduling.reconcile import reconcile_all, reconcile_cluster
from tests.kube.test_reconcile import node_of, push_everything, schedule_and_push, submit, workload

NS = "demo"


def deployment(replicas: int = 2, image: str = "vllm:0.6", tolerations=None) -> dict:
    spec = {
        "nodeSelector": {"kubernetes.io/hostname": "gpu-01"},
        "containers": [{"name": "srv", "image": image}],
    }
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "srv", "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "suanchi"}},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": "srv"}},
            "template": {
                "metadata": {"labels": {"app": "srv", "app.kubernetes.io/managed-by": "suanchi"}},
                "spec": spec,
            },
        },
    }


@pytest.fixture
def sim():
    backend = FaithfulSimulatedBackend(seed=3)
    backend.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    backend.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-01", "labels": {}}})
    return backend


def pods(backend):
    return backend.list_owned("Pod", NS)


def test_deleting_a_deployment_leaves_its_pods_terminating_for_the_grace_period(sim):
    sim.apply(deployment())
    sim.advance(6)
    assert [p["status"]["phase"] for p in pods(sim)] == ["Running", "Running"]
    assert sim.delete("Deployment", NS, "srv")
    assert sim.get("Deployment", NS, "srv") is None
    terminating = pods(sim)
    assert len(terminating) == 2 and all(p["metadata"]["deletionTimestamp"] for p in terminating)
    assert {p["metadata"]["deletionGracePeriodSeconds"] for p in terminating} == {30}
    sim.advance(29)
    assert len(pods(sim)) == 2  # still within the grace period
    sim.advance(1)
    assert pods(sim) == []


def test_a_pod_that_never_started_goes_at_once(sim):
    sim.apply(deployment(replicas=1))
    assert pods(sim)[0]["status"]["phase"] == "Pending"
    sim.delete("Deployment", NS, "srv")
    assert pods(sim) == []


def test_a_noexecute_taint_evicts_only_pods_that_do_not_tolerate_it(sim):
    tolerant = {"key": "suanchi.io/quarantine", "operator": "Exists", "effect": "NoExecute"}
    sim.apply(deployment(replicas=1))
    other = deployment(replicas=1, tolerations=[tolerant])
    other["metadata"]["name"] = "tolerant"
    sim.apply(other)
    sim.advance(6)
    sim.patch_node(
        "gpu-01", taints=[{"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"}]
    )
    by_owner = {p["metadata"]["ownerReferences"][0]["name"]: p for p in pods(sim)}
    evicted = by_owner["srv"]
    assert evicted["metadata"]["deletionTimestamp"]
    assert [c["reason"] for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
        "DeletionByTaintManager"
    ]
    assert not by_owner["tolerant"]["metadata"].get("deletionTimestamp")
    sim.advance(30)
    assert [p["metadata"]["ownerReferences"][0]["name"] for p in pods(sim)] == ["tolerant"]


def test_a_template_change_recreates_the_pods_and_a_scale_keeps_them(sim):
    sim.apply(deployment(replicas=1))
    sim.advance(6)
    (first,) = pods(sim)
    # Scaling 1 → 2: the running pod stays, one more comes.
    sim.apply(deployment(replicas=2))
    names = {p["metadata"]["name"] for p in pods(sim)}
    assert first["metadata"]["name"] in names and len(names) == 2
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods(sim))
    sim.advance(6)
    # A new image: Recreate ends every old pod first; the new revision's pods wait for that.
    sim.apply(deployment(replicas=2, image="vllm:0.7"))
    assert all(p["metadata"]["deletionTimestamp"] for p in pods(sim)) and len(pods(sim)) == 2
    sim.advance(30)
    fresh = pods(sim)
    assert len(fresh) == 2 and not (names & {p["metadata"]["name"] for p in fresh})
    assert {p["spec"]["containers"][0]["image"] for p in fresh} == {"vllm:0.7"}


def test_terminating_pods_survive_a_state_round_trip(sim):
    sim.apply(deployment(replicas=1))
    sim.advance(6)
    sim.delete("Deployment", NS, "srv")
    again = FaithfulSimulatedBackend.from_state(sim.to_state(), seed=3)
    assert len(pods(again)) == 1
    again.advance(30)
    assert pods(again) == []


# -- through Suanchi, on the durable simulated cluster the demo uses -------------------------------


@pytest.mark.django_db
def test_the_demo_cluster_holds_cancelled_cards_until_the_pod_is_gone(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100))
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    backend.advance(6)
    assert reconcile_cluster(cluster=cluster).running == 1
    w = workload(job)
    job_cancel(job=job, actor=user)
    push_everything()
    (pod,) = backend.pods_of(w.namespace, w.name)
    assert pod["metadata"]["deletionTimestamp"]
    reconcile_all()
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 1
    backend.advance(30)
    reconcile_all()
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


@pytest.mark.django_db
def test_the_demo_cluster_evicts_jobs_from_a_quarantined_node(fleet, member_project, a100):
    user, project = member_project
    first = schedule_and_push(submit(project, user, a100, name="a"))
    second = schedule_and_push(submit(project, user, a100, name="b"))
    node = node_of(first)
    assert node_of(second) == node
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    backend.advance(6)
    assert reconcile_cluster(cluster=cluster).running == 2
    node_status_change(
        node=Node.objects.get(name=node), status=Node.Status.QUARANTINED, reason="fan failure", actor="ops"
    )
    for job in (first, second):
        job.refresh_from_db()
        assert job.state == JobState.PENDING
        assert "fan failure" in job.events.get(kind=JobEvent.Kind.RETRY).message
    push_everything()  # the taint lands on the simulated Node: its pods are evicted and deleted
    live = backend.get("Node", None, node)
    assert {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"} in live["spec"]["taints"]
    assert reconcile_cluster(cluster=cluster).retried == 0  # no second retry for the eviction
    backend.advance(30)
    reconcile_all()
    assert not Allocation.objects.filter(job__in=[first, second], released_at__isnull=True).exists()
