"""The sumsq policy (issue 31 §1): slotfrag plus the Sum-of-Squares rule over the cards' free gaps.

N(h) counts the partly used cards with free gap h over the fleet (``GapHistogram``); moving one card
from gap g to g − s changes Σ N(h)² by 2·(N(g − s) − N(g)) + 2 (Csirik et al., J. ACM 2006).
"""

from __future__ import annotations

from apps.scheduling.engine import (
    DeviceGroup,
    DeviceState,
    Engine,
    NodeState,
    Request,
    Snapshot,
    trace_replay,
)
from apps.scheduling.engine.policies import GapHistogram, SumSqPolicy, get_policy
from apps.scheduling.engine.trace_replay import NodeSpec, PodSpec


def _fleet(cards: int = 2, nodes: int = 2) -> Snapshot:
    return Snapshot(
        [
            NodeState(
                f"n{k}",
                cpu_milli=32_000,
                memory_mib=64_000,
                devices=[DeviceState(f"n{k}/gpu{i}", i, kind="gpu", model="T4") for i in range(cards)],
            )
            for k in range(nodes)
        ]
    )


def _slice(rid: str, compute: int) -> Request:
    return Request(
        rid, cpu_milli=1_000, groups=(DeviceGroup(count=1, whole=False, compute=compute, kind="gpu"),)
    )


def _engine(workload) -> Engine:
    return Engine(
        SumSqPolicy(ss_epoch=1), seed=3, explain=False, top_k=0, workload=workload, tie_break="order"
    )


def _card_of(snap: Snapshot, rid: str) -> tuple[str, str]:
    part = snap.placements[rid].parts[0]
    return part.node, part.devices[0].device_id


def test_the_rule_fills_an_existing_gap_instead_of_opening_a_card():
    snap = _fleet()
    first, second = _slice("a", 500), _slice("b", 500)
    engine = _engine([first, second])
    assert engine.place(snap, first).placement is not None
    assert engine.place(snap, second).placement is not None
    # the second half-card slice closes the first one's gap; no other card is opened
    assert _card_of(snap, "a") == _card_of(snap, "b")
    assert GapHistogram.recount(snap) == {}
    assert not snap.check_invariants()


def test_the_change_of_the_sum_of_squares_is_the_papers_formula():
    policy = SumSqPolicy()
    policy.frozen = {50: 3, 20: 1}
    assert policy.ss_delta(50, 20) == 2 * (1 - 3) + 2  # a card moves between two counted gaps
    assert policy.ss_delta(0, 50) == 2 * 3 + 1  # an empty card opens into gap 50
    assert policy.ss_delta(50, 0) == -2 * 3 + 1  # the card fills up and leaves the histogram
    assert policy.ss_delta(20, 20) == 0


def test_levels_are_coarse_bins_and_gaps_under_one_level_are_closed():
    policy = SumSqPolicy()
    assert [policy.level(g) for g in (0, 60, 99, 100, 190, 530)] == [0, 0, 0, 1, 1, 5]
    policy.frozen = {1: 4}
    # a 160 slice that closes a 190 gap helps; one that opens an empty card into level 8 costs
    assert policy.ss_delta(policy.level(190), policy.level(30)) == -2 * 4 + 1
    assert policy.ss_delta(0, policy.level(840)) == 1


def test_the_histogram_stays_equal_to_a_recount_after_placements_and_releases():
    snap = _fleet(cards=4, nodes=3)
    reqs = [_slice(f"r{i}", (300, 470, 810, 160, 250)[i % 5]) for i in range(14)]
    engine = _engine(reqs)
    policy = engine.policy
    assert isinstance(policy, SumSqPolicy)
    for i, req in enumerate(reqs):
        engine.place(snap, req)
        if i % 4 == 3:  # give back an earlier placement now and then
            placed = sorted(snap.placements)
            engine.release(snap, placed[len(placed) // 2])
        policy.gaps.sync(snap)
        assert policy.gaps.counts == GapHistogram.recount(snap)
    assert sum(policy.gaps.counts.values()) > 0
    assert not snap.check_invariants()


def test_scores_read_a_frozen_copy_and_each_refresh_bumps_the_version():
    snap = _fleet()
    reqs = [_slice("a", 300), _slice("b", 300)]
    engine = Engine(SumSqPolicy(ss_epoch=1), explain=False, top_k=0, workload=reqs, tie_break="order")
    policy = engine.policy
    engine.place(snap, reqs[0])
    before = policy.version
    engine.place(snap, reqs[1])  # observe() reads the first placement's change: a new frozen copy
    assert policy.version > before
    assert policy.frozen == {7: 1}  # one card with 700 milli free: level 7 of 100 milli each


def test_a_trace_run_is_deterministic_per_seed_and_registered():
    assert isinstance(get_policy("sumsq"), SumSqPolicy)
    nodes = [NodeSpec(f"n{i}", 32_000, 131_072, 2 + 2 * (i % 2), "T4") for i in range(4)]
    pods = [
        PodSpec(f"p{i}", 2_000 * (1 + i % 3), 4_096, 1 + (i % 5 == 0), (250, 470, 1000, 810)[i % 4])
        for i in range(11)
    ]
    a = trace_replay.run_once(nodes, pods, "sumsq", 7, frag=False)
    b = trace_replay.run_once(nodes, pods, "sumsq", 7, frag=False)
    assert a["curve"] == b["curve"] and a["failed_pods"] == b["failed_pods"]
    assert 0.0 <= a["unallocated_at_100"] <= 100.0
