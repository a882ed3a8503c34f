"""The engine's capacity index (engine/index.py): the same decisions as a per-node scan, kept current
by apply / release, explanations counted per node class, per-node reasons only when read."""

from __future__ import annotations

import random

import pytest

from apps.scheduling.engine import (
    DeviceGroup,
    DeviceState,
    Engine,
    Isolation,
    NodeState,
    PoolInfo,
    Request,
    Snapshot,
    Taint,
    Toleration,
    filters,
)
from apps.scheduling.engine.index import NodeClasses
from apps.scheduling.engine.model import LazyMapping

GiB = 1024

# (vendor, kind, model, card memory MiB, cards, cliques) - a small mixed fleet
TYPES = [
    ("nvidia", "gpu", "A100", 80 * GiB, 8, 1),
    ("nvidia", "gpu", "L40S", 45 * GiB, 4, 0),
    ("huawei", "npu", "910B", 64 * GiB, 8, 1),
]


def fleet(n: int, seed: int) -> Snapshot:
    rng = random.Random(seed)
    snap = Snapshot(pools=[PoolInfo("train"), PoolInfo("infer", overcommit_pct=150)])
    for i in range(n):
        vendor, kind, model, mem, cards, cliques = TYPES[i % len(TYPES)]
        name = f"{vendor}-{i:03d}"
        devices = [
            DeviceState(
                f"{name}/{k}",
                k,
                kind=kind,
                vendor=vendor,
                model=model,
                memory_mib=mem,
                topology_group=f"{name}-c" if cliques else "",
                pcie_switch=f"{name}-sw{k // 2}",
                numa_node=k // 4,
            )
            for k in range(cards)
        ]
        snap.add_node(
            NodeState(
                name,
                cpu_milli=rng.choice([64_000, 128_000]),
                memory_mib=512 * GiB,
                devices=devices,
                pool=rng.choice(["train", "infer"]),
                taints=[Taint("accelerator", "npu")] if kind == "npu" else [],
            )
        )
    return snap


def queue(n: int, seed: int, precheck=()) -> list[Request]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        vendor = rng.choice(["nvidia", "huawei", None])
        tol = (Toleration("accelerator", "Exists"),) if vendor != "nvidia" else ()
        vendors = frozenset([vendor]) if vendor else frozenset()
        roll = rng.random()
        if roll < 0.5:
            count = rng.choice([1, 1, 2, 4, 8])
            group = DeviceGroup(count=count, vendors=vendors)
            cpu = 8_000 * count
        elif roll < 0.75:
            group = DeviceGroup(
                whole=False,
                memory_mib=rng.choice([10 * GiB, 20 * GiB]),
                compute=rng.choice([250, 500]),
                isolation=Isolation.HARD,
                vendors=vendors,
            )
            cpu = 4_000
        else:
            group = DeviceGroup(
                whole=False,
                memory_mib=4 * GiB,
                compute=rng.choice([100, 300]),
                isolation=Isolation.SHARED,
                vendors=vendors,
            )
            cpu = 2_000
        out.append(
            Request(
                f"r{i}",
                cpu_milli=cpu,
                memory_mib=cpu * 4,
                groups=(group,),
                tolerations=tol,
                precheck_failures=precheck,
            )
        )
    return out


def run(policy: str, reqs: list[Request], seed: int, tie_break: str = "order") -> tuple[list, Snapshot]:
    """Place the queue; every 7th step releases an earlier placement (so capacity comes back)."""
    snap = fleet(60, seed)
    engine = Engine(policy, seed=seed, tie_break=tie_break, workload=reqs)
    rng = random.Random(seed)
    out = []
    for i, req in enumerate(reqs):
        d = engine.place(snap, req)
        out.append(None if d.placement is None else d.placement.to_dict()["parts"])
        if i % 7 == 6 and snap.placements:
            victim = rng.choice(sorted(snap.placements))
            engine.release(snap, victim)
            out.append(("released", victim))
    assert snap.check_invariants() == []
    return out, snap


@pytest.mark.parametrize("policy", ["slotfrag", "bestfit", "fgd", "packing", "binpack", "spread", "topology"])
def test_indexed_decisions_equal_a_per_node_scan(policy):
    # A precheck failure naming no real node sends the request down the per-node path (the reference);
    # it changes nothing else, so both runs must place every request on the same node and cards.
    indexed, snap = run(policy, queue(400, 3), 3)
    scanned, _ = run(policy, queue(400, 3, precheck={"no-such-node": "x"}), 3)
    assert indexed == scanned
    assert sum(1 for x in indexed if x) > 100  # most requests placed, some not: both paths exercised
    assert any(x is None for x in indexed)


def test_random_tie_break_stays_valid_and_seeded():
    a, _ = run("slotfrag", queue(200, 5), 5, tie_break="random")
    b, _ = run("slotfrag", queue(200, 5), 5, tie_break="random")
    assert a == b  # reproducible per seed


def test_the_index_follows_apply_and_release():
    reqs = queue(150, 9)
    _out, snap = run("slotfrag", reqs, 9)
    live = NodeClasses.of(snap)
    fresh = NodeClasses(snap)
    as_sets = lambda idx: {  # noqa: E731
        (idx.sig_class[sid], tuple(pos)) for sid, pos in idx.members.items()
    }
    assert as_sets(live) == as_sets(fresh)
    assert len(live.members) < len(snap.nodes)  # identical nodes share a signature
    assert sorted(p for pos in live.members.values() for p in pos) == list(range(len(snap.nodes)))


def test_explanation_counts_per_reason_class_without_building_per_node_reasons():
    snap = fleet(30, 1)
    engine = Engine("slotfrag", seed=1)
    for i in range(40):
        engine.place(snap, Request(f"fill{i}", cpu_milli=8_000, groups=(DeviceGroup(count=8),)))
    big = Request("big", cpu_milli=8_000, groups=(DeviceGroup(count=8, vendors={"nvidia"}),))
    d = engine.place(snap, big)
    assert not d.placed
    assert isinstance(d.rejections, LazyMapping) and d.rejections._data is None  # not built yet
    reference = engine.place(
        snap, Request("big2", cpu_milli=8_000, groups=big.groups, precheck_failures={"x": "y"})
    )
    assert d.explanation == reference.explanation
    assert d.explanation.startswith("0/30 nodes are available: ")
    # the tainted NPU nodes and the full A100 nodes, each counted as a class, not node by node
    assert "10 untolerated taint accelerator=npu" in d.explanation
    assert "10 insufficient free cards" in d.explanation
    # the per-node reasons, read on demand, match the per-node path exactly and add up to the counts
    assert dict(d.rejections) == dict(reference.rejections)
    assert filters.explain(30, d.rejections.values()) == d.explanation
    assert d.to_dict(rejections=False)["rejections"] == {}


def test_static_result_per_class_matches_the_per_node_filter():
    snap = fleet(45, 2)
    req = Request("q", groups=(DeviceGroup(count=4, vendors={"nvidia"}),), pool="infer")
    by_class = filters.static_filter_classes(snap, req, NodeClasses.of(snap))
    by_node = filters.static_filter(snap, req)
    assert by_class.rejected == by_node.rejected
    assert by_class.elig_by_pos == by_node.elig_by_pos
    assert by_class.counts() == by_node.counts()
    assert by_class.n_eligible == len(by_node.eligible) > 0


def test_top_candidates_on_demand_match_what_place_chooses():
    snap = fleet(30, 4)
    engine = Engine("slotfrag", seed=4, tie_break="order")
    for i in range(12):
        engine.place(
            snap, Request(f"fill{i}", cpu_milli=4_000, groups=(DeviceGroup(count=2, vendors={"nvidia"}),))
        )
    req = Request("probe", cpu_milli=4_000, groups=(DeviceGroup(count=2, vendors={"nvidia"}),))
    top = engine.top_candidates(snap, req, 5)
    assert len(top) == 5 and len({c.node for c in top}) == 5
    assert [c.score for c in top] == sorted((c.score for c in top), reverse=True)
    assert not snap.placements.get("probe")  # nothing applied
    decision = engine.place(snap, req)
    assert decision.placement.nodes == (top[0].node,)
