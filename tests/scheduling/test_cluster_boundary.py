"""Issue 18 item 4: a job never spans clusters (``apps/scheduling/engine/clusters.py``)."""

from __future__ import annotations

import pytest

from apps.clusters.models import ClusterPreference
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.engine import (
    DeviceGroup,
    DeviceState,
    Engine,
    NodeState,
    Request,
    Snapshot,
    TopologyPolicy,
)
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.services import scheduling_cycle_run


def _node(
    name: str, cluster: str, cards: int, vendor: str = "nvidia", kind: str = "gpu", model: str = "A100"
):
    devices = [
        DeviceState(f"{name}-{i}", i, kind=kind, vendor=vendor, model=model, memory_mib=65536)
        for i in range(cards)
    ]
    return NodeState(name, cpu_milli=64_000, memory_mib=512_000, devices=devices, cluster=cluster)


def _cluster_of(snapshot: Snapshot, placement) -> set[str]:
    return {snapshot.by_name[p.node].cluster for p in placement.parts}


# ------------------------------------------------------------------ engine


def test_a_gang_that_only_two_clusters_together_could_hold_pends_with_the_reason_per_cluster():
    snapshot = Snapshot([_node("a1", "east", 8), _node("b1", "west", 8)])
    gang = Request("gang", replicas=2, groups=(DeviceGroup(count=8),))
    decision = Engine(seed=1).place(snapshot, gang)
    assert not decision.placed and not snapshot.placements
    assert decision.explanation.startswith(
        "no single cluster can hold the whole job (a job never spans clusters)"
    )
    assert "east: gang of 2 replicas: only 1 fit" in decision.explanation
    assert "west: gang of 2 replicas: only 1 fit" in decision.explanation
    assert decision.steps[0].tier == "cluster"
    # a third cluster that can hold it alone gets the whole gang
    snapshot.add_node(_node("c1", "north", 8))
    snapshot.add_node(_node("c2", "north", 8))
    decision = Engine(seed=1).place(snapshot, gang)
    assert decision.placed and _cluster_of(snapshot, decision.placement) == {"north"}
    assert decision.steps[0].tier == "cluster" and decision.steps[0].message.startswith("cluster north")
    assert "not feasible: east" in decision.steps[0].message


def test_a_request_template_across_vendors_is_placed_within_one_cluster_or_pends():
    gpu_npu = Request(
        "mixed",
        groups=(
            DeviceGroup(count=2, kind="gpu", vendors={"nvidia"}),
            DeviceGroup(count=2, kind="npu", vendors={"huawei"}),
        ),
        topology=TopologyPolicy(placement="any"),
    )
    # the GPU cluster has no NPU, the NPU cluster no GPU: `placement: any` must not stitch them together
    snapshot = Snapshot(
        [
            _node("g1", "gpus", 8),
            _node("n1", "npus", 8, vendor="huawei", kind="npu", model="Ascend 910B3"),
        ]
    )
    decision = Engine(seed=2).place(snapshot, gpu_npu)
    assert not decision.placed
    assert "gpus:" in decision.explanation and "npus:" in decision.explanation
    # a cluster with both, on two nodes: `any` splits across its nodes, never across clusters
    snapshot.add_node(_node("g2", "both", 2))
    snapshot.add_node(_node("n2", "both", 2, vendor="huawei", kind="npu", model="Ascend 910B3"))
    decision = Engine(seed=2).place(snapshot, gpu_npu)
    assert decision.placed and _cluster_of(snapshot, decision.placement) == {"both"}
    assert set(decision.placement.nodes) == {"g2", "n2"} and decision.placement.cross_node


def test_preference_orders_the_clusters_and_the_policy_decides_between_equals():
    snapshot = Snapshot([_node("cloud-1", "cloud", 8), _node("prem-1", "onprem", 8)])
    snapshot.cluster_preference = {"onprem": 0, "cloud": 10}
    engine = Engine(seed=4)
    first = engine.place(snapshot, Request("j1", groups=(DeviceGroup(count=8),)))
    assert _cluster_of(snapshot, first.placement) == {"onprem"}
    assert first.steps[0].data["preference"] == 0 and first.steps[0].data["cluster"] == "onprem"
    # on-prem full: the next job goes to the cloud, and the trace says why
    second = engine.place(snapshot, Request("j2", groups=(DeviceGroup(count=8),)))
    assert _cluster_of(snapshot, second.placement) == {"cloud"}
    assert "not feasible: onprem" in second.steps[0].message
    # a request pinned to a cluster only sees that cluster's nodes
    pinned = engine.place(snapshot, Request("j3", groups=(DeviceGroup(count=1),), cluster="onprem"))
    assert not pinned.placed and "node in another cluster" in pinned.explanation


def test_one_cluster_snapshots_decide_exactly_as_before():
    def run(cluster: str) -> list:
        snapshot = Snapshot([_node(f"n{i}", cluster, 4) for i in range(4)])
        engine = Engine(seed=9)
        out = []
        for i in range(12):
            d = engine.place(snapshot, Request(f"r{i}", groups=(DeviceGroup(count=1 + i % 3),)))
            out.append(d.placement.to_dict() if d.placed else d.explanation)
        return out

    assert run("") == run("only")


# ------------------------------------------------------------------ the ledger


@pytest.fixture
def two_clusters(a100):
    out = {}
    for slug in ("east", "west"):
        cluster = Cluster.objects.create(name=slug.title(), slug=slug)
        pool = Pool.objects.create(cluster=cluster, name="training", slug=f"training-{slug}")
        node = Node.objects.create(
            cluster=cluster,
            pool=pool,
            name=f"{slug}-gpu-01",
            cpu_cores=64,
            memory_mib=512_000,
            taints=[{"key": "accelerator", "value": "nvidia-gpu", "effect": "NoSchedule"}],
        )
        for i in range(4):
            Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"{slug}-{i}", device_model=a100)
        out[slug] = cluster
    return out


def _submit(project, user, a100, **fields):
    return job_submit(
        project=project,
        actor=user,
        name=fields.pop("name", "train"),
        image="pytorch:2.3",
        request_kind="whole_cards",
        device_model=a100,
        **fields,
    )


def test_the_ledger_never_gives_one_job_cards_in_two_clusters(two_clusters, member_project, a100):
    user, project = member_project
    # 2 replicas x 4 cards: east and west have 4 cards each - only both together could
    with pytest.raises(ValidationFailed) as refused:
        _submit(project, user, a100, count=4, replicas=2)
    assert "no single cluster can hold the whole job" in str(refused.value.message)
    assert not Job.objects.exists()
    # the preferred cluster takes jobs first, the other one the rest; no job straddles them
    ClusterPreference.objects.create(cluster=two_clusters["west"], preference=0)
    ClusterPreference.objects.create(cluster=two_clusters["east"], preference=5)
    jobs = [_submit(project, user, a100, name=f"j{i}", count=3) for i in range(3)]
    scheduling_cycle_run()
    states = []
    for job in jobs:
        job.refresh_from_db()
        states.append(job.state)
        clusters = set(Allocation.objects.filter(job=job).values_list("node__cluster__slug", flat=True))
        assert len(clusters) <= 1
    assert states == [JobState.SCHEDULED, JobState.SCHEDULED, JobState.PENDING]
    first = set(Allocation.objects.filter(job=jobs[0]).values_list("node__cluster__slug", flat=True))
    assert first == {"west"}
