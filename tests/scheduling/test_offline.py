"""Offline references of the simulator (engine/offline.py): the LP bound and the hindsight packing."""

from __future__ import annotations

import pytest

from apps.scheduling.engine import offline, trace_replay
from apps.scheduling.engine.trace_replay import NodeSpec, PodSpec


def pod(name, num, milli, cpu=1000, mem=1024, models=()):
    return PodSpec(name, cpu, mem, num, milli, frozenset(models))


def test_sharing_pods_above_half_a_card_never_pair_on_one_card():
    nodes = [NodeSpec("n", 32_000, 65_536, 2, "T4")]
    pods = [pod(f"p{i}", 1, 600) for i in range(3)]  # 1,800 of 2,000 milli, but no two share a card
    lp = offline.lp_bound(nodes, pods)
    assert lp["status"] == "optimal"
    assert lp["allocated"] == pytest.approx(1200)  # the GPU-milli relaxation alone would say 1,800
    packed = offline.hindsight(lambda: trace_replay.build_snapshot(nodes), pods, trace_replay.to_request)
    assert packed["allocated"] == 1200


def test_a_pod_asking_three_shared_cards_is_not_put_on_one():
    # 3 × 650 milli on a 2-card node: nothing fits (the pod needs three distinct cards)
    nodes = [NodeSpec("n", 32_000, 65_536, 2, "T4")]
    pods = [pod("p", 3, 650)]
    packed = offline.hindsight(lambda: trace_replay.build_snapshot(nodes), pods, trace_replay.to_request)
    assert packed["allocated"] == 0
    assert offline.card_lp_bound(nodes, pods)["allocated"] == 0
    assert offline.lp_bound(nodes, pods)["allocated"] == 0


def test_multi_card_sharing_pods_hold_their_cards_through_the_repack():
    # 2 × 650 fits the 2-card node only on both cards; the 300s fill what it leaves, and left-out 300s
    # must not push it onto one card
    nodes = [NodeSpec("n", 32_000, 65_536, 2, "T4")]
    pods = [pod("m", 2, 650)] + [pod(f"s{i}", 1, 300) for i in range(4)]
    packed = offline.hindsight(lambda: trace_replay.build_snapshot(nodes), pods, trace_replay.to_request)
    assert packed["allocated"] == 1300 + 600  # one 300 per card beside the 650s, or 4 × 300 (1,200)


def test_card_count_check_sees_a_shared_multi_card_pod_on_one_card():
    from apps.scheduling.engine import assign
    from apps.scheduling.engine.decision import Placement

    nodes = [NodeSpec("n", 32_000, 65_536, 3, "T4")]
    snap = trace_replay.build_snapshot(nodes)
    req = trace_replay.to_request(pod("p", 3, 300), "p")
    node = snap.nodes[0]
    snap.apply(Placement("p", (assign.build_part(node, req, ((0,),), ""),)))  # one card, asks three
    assert snap.check_invariants() == []  # each card's load is fine ...
    assert offline.card_count_problems(snap, {"p": req}) == ["p: group 0 on 1 distinct cards, asks 3"]
    snap.release("p")
    snap.apply(Placement("p", (assign.build_part(node, req, ((0, 1, 2),), ""),)))
    assert offline.card_count_problems(snap, {"p": req}) == []


def test_model_cpu_and_memory_constraints_bound_the_lp():
    nodes = [NodeSpec("a", 8_000, 16_384, 4, "T4"), NodeSpec("b", 64_000, 262_144, 2, "V100")]
    pods = [
        pod("v", 2, 1000, models={"V100"}),
        pod("v2", 2, 1000, models={"V100"}),  # only one V100 node with 2 cards: one of them fits
        pod("cpu-heavy", 1, 1000, cpu=16_000),  # does not fit node a (8 cores); b is taken by a V100 pod
        pod("t", 1, 1000),
    ]
    lp = offline.lp_bound(nodes, pods)
    # V100: 2,000; node a: 1 card for "t"; "cpu-heavy" only fits b, whose cards hold one V100 pod
    assert lp["allocated"] == pytest.approx(3000)
    packed = offline.hindsight(lambda: trace_replay.build_snapshot(nodes), pods, trace_replay.to_request)
    assert packed["allocated"] <= lp["allocated"] + 1e-6
    assert packed["allocated"] == 3000


def test_arrived_at_100_is_the_prefix_within_capacity():
    pods = [pod("a", 1, 1000), pod("b", 1, 500), pod("c", 2, 1000), pod("d", 0, 0)]
    assert [p.name for p in offline.arrived_at_100(pods, 2000)] == ["a", "b"]


def test_references_order_and_gaps_on_a_small_trace(tmp_path):
    (tmp_path / "n.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,131072,{1 + i % 4},T4\n" for i in range(8))
    )
    rows = [
        f"p{i},{2000 + 1000 * (i % 5)},8192,{1 + i % 3},{1000 if i % 4 else 300 + 50 * (i % 7)}"
        for i in range(40)
    ]
    (tmp_path / "p.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "\n".join(rows) + "\n")
    nodes = trace_replay.load_nodes(tmp_path / "n.csv")
    pods = trace_replay.load_pods(tmp_path / "p.csv")
    results = trace_replay.run_benchmark(nodes, pods, ["bestfit", "slotfrag"], [1, 2])
    ref = trace_replay.offline_references(nodes, pods, [1, 2], results=results, time_limit=1.0)
    for seed in ("1", "2"):
        r = ref["per_seed"][seed]
        assert r["bound"] <= r["hindsight"] + 1e-6  # nothing beats the bound
        assert r["hindsight"] <= r["hindsight_greedy"] + 1e-6  # local search never loses ground
    best = ref["best_online"]
    assert ref["gap_to_bound"] == pytest.approx(
        results[best]["unallocated_at_100"]["mean"] - ref["bound"]["mean"], abs=1e-3
    )
    assert ref["gap_to_bound"] >= -1e-6
