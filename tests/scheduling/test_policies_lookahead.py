"""The lookahead policy (issue 31 §1): slotfrag plus the idle compute sampled futures leave behind.

``FragModel._fill`` plays fixed futures of the workload's pods on one node state (a pod that fits
goes on the best-fitting cards, one that does not is skipped) and averages the idle compute left.
"""

from __future__ import annotations

import pytest

from apps.scheduling.engine import (
    DeviceGroup,
    DeviceState,
    Engine,
    NodeState,
    Request,
    Snapshot,
    assign,
    trace_replay,
)
from apps.scheduling.engine.frag import FragModel, Shape
from apps.scheduling.engine.policies import LookaheadPolicy, SlotFragPolicy, get_policy
from apps.scheduling.engine.trace_replay import NodeSpec, PodSpec

HW = (("gpu", "", ""),)


def model(shapes, horizon=32, paths=8) -> FragModel:
    return FragModel(shapes, "slots", fill=(1.0, horizon, paths))


def test_one_shape_leaves_exactly_its_remainder():
    m = model([(Shape(cpu_milli=1_000, count=1, compute=600, whole=False), 1.0)])
    # a 1,000-milli card takes one 600 pod in every future: 400 left; 2 cards: 800
    assert m._fill(m.key(HW, 64_000, 0, [(0, 1000, 0, True)])) == pytest.approx(400)
    assert m._fill(m.key(HW, 64_000, 0, [(0, 1000, 0, True)] * 2)) == pytest.approx(800)
    assert m._fill(m.key(HW, 64_000, 0, [(0, 0, 0, False)] * 2)) == 0.0  # nothing idle


def test_cpu_limits_the_futures_and_the_value_adds_the_weighted_term():
    m = model([(Shape(cpu_milli=4_000, count=1), 1.0)])
    key = m.key(HW, 4_000, 0, [(0, 1000, 0, True)] * 2)
    assert m._fill(key) == pytest.approx(1000)  # CPU for one whole-card pod: one card stays idle
    plain = FragModel([(Shape(cpu_milli=4_000, count=1), 1.0)], "slots")
    assert m.value(key) == pytest.approx(plain.value(key) + 1000)


def test_a_mix_fills_what_one_shape_alone_cannot():
    small = (Shape(cpu_milli=1_000, count=1, compute=400, whole=False), 0.5)
    big = (Shape(cpu_milli=1_000, count=1, compute=600, whole=False), 0.5)
    key = model([big]).key(HW, 64_000, 0, [(0, 1000, 0, True)])
    mixed = model([small, big], horizon=64, paths=16)._fill(key)
    # 600 + 400 fills the card, 400 + 400 leaves 200: never more than the 600 shape alone leaves
    assert 0.0 <= mixed <= 200.0 + 1e-9
    assert mixed < model([big])._fill(key)


def test_the_futures_are_the_same_for_every_model_of_a_workload():
    shapes = [(Shape(count=1), 0.5), (Shape(count=1, compute=300, whole=False), 0.5)]
    assert model(shapes)._paths == model(shapes)._paths
    assert len(model(shapes)._paths) == 8 and all(len(p) == 32 for p in model(shapes)._paths)
    assert isinstance(get_policy("lookahead"), LookaheadPolicy)


def _run(policy: str, nodes, pods) -> list[bool]:
    snap = trace_replay.build_snapshot(nodes)
    reqs = [trace_replay.to_request(p, f"{p.name}#{i}") for i, p in enumerate(pods)]
    engine = Engine(policy, seed=1, explain=False, top_k=0, workload=reqs, tie_break="order")
    placed = [engine.place(snap, r).placement is not None for r in reqs]
    assert not snap.check_invariants()
    return placed


def test_an_instance_where_looking_ahead_places_every_pod():
    # two one-card nodes (8 and 16 cores); found by a random search over small instances
    nodes = [NodeSpec("n0", 8_000, 65_536, 1, "T4"), NodeSpec("n1", 16_000, 65_536, 1, "T4")]
    pods = [
        PodSpec("p0", 4_000, 1_024, 1, 300),
        PodSpec("p1", 1_000, 1_024, 1, 1000),
        PodSpec("p2", 4_000, 1_024, 1, 250),
        PodSpec("p3", 1_000, 1_024, 1, 250),
    ]
    ahead = _run("lookahead", nodes, pods)
    slot = _run("slotfrag", nodes, pods)
    assert all(ahead)  # every pod placed: no policy can do better on this sequence
    assert sum(ahead) >= sum(slot)
    # slotfrag puts the 300 on the small node; its CPU then runs out before the last 250 arrives
    assert slot == [True, True, True, False]


def test_a_trace_run_is_deterministic_per_seed_and_valid():
    nodes = [NodeSpec(f"n{i}", 32_000, 131_072, 2 + 2 * (i % 2), "T4") for i in range(4)]
    pods = [
        PodSpec(f"p{i}", 2_000 * (1 + i % 3), 4_096, 1 + (i % 5 == 0), (250, 500, 1000)[i % 3])
        for i in range(9)
    ]
    a = trace_replay.run_once(nodes, pods, "lookahead", 7, frag=False)
    b = trace_replay.run_once(nodes, pods, "lookahead", 7, frag=False)
    assert a["curve"] == b["curve"] and a["failed_pods"] == b["failed_pods"]
    assert 0.0 <= a["unallocated_at_100"] <= 100.0


@pytest.mark.parametrize(("scarce", "same"), [(True, True), (False, False)], ids=["cpu-scarce", "cpu-plenty"])
def test_where_cpu_is_scarce_the_lookahead_is_left_out_like_the_stranded_term(scarce, same):
    # one 2-card node, 12 cores; sharing pods of 600 and 400 milli, 1 core each (and CPU-only pods of 4
    # cores where CPU is scarce: 10 cores asked per card, 6 in the fleet)
    devices = [DeviceState(f"n/gpu{i}", i, kind="gpu", model="T4") for i in range(2)]
    pods = [
        Request(f"s{c}", cpu_milli=1_000, groups=(DeviceGroup(count=1, whole=False, compute=c, kind="gpu"),))
        for c in (600, 400)
    ]
    gpu_pod = pods[0]
    workload = pods + ([Request("c", cpu_milli=4_000)] * 2 if scarce else [])
    keys = []
    for policy in (SlotFragPolicy(), LookaheadPolicy()):
        snap = Snapshot([NodeState("n", cpu_milli=12_000, memory_mib=64_000, devices=list(devices))])
        policy.bind(snap)
        policy.set_workload(workload)
        node = snap.nodes[0]
        opts = assign.options(node, gpu_pod, ((0, 1),), node.factor)
        keys.append(policy.score(snap, node, gpu_pod, opts, None)[0])
        assert policy.scarce_cpu is scarce
    assert (keys[0] == keys[1]) is same


def test_model_constrained_workloads_get_no_futures():
    free = Shape(count=1)
    pinned = Shape(count=1, compute=500, whole=False, models=frozenset({"V100M16"}))
    assert model([(free, 1.0)])._paths
    constrained = model([(free, 0.5), (pinned, 0.5)])
    assert constrained._paths == []
    key = constrained.key(HW, 64_000, 0, [(0, 1000, 0, True)])
    assert constrained._fill(key) == 0.0
    assert constrained.value(key) == pytest.approx(
        FragModel([(free, 0.5), (pinned, 0.5)], "slots").value(key)
    )
