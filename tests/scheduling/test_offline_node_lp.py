"""The node-pattern bound (engine/node_bound.py, issue 31 §1): valid against the exact optimum (an exact
MIP over the full assignment: every pod to a node and its cards) on small instances sampled from the
published trace (benchmarks/data/alibaba-gpu-trace-2023/, alibaba/clusterdata), tight where CPU binds
(where the card-pattern LP is loose), and still valid when column generation is stopped early."""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from apps.scheduling.engine import node_bound, offline, trace_replay
from apps.scheduling.engine.trace_replay import NodeSpec, PodSpec

TRACE = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "alibaba-gpu-trace-2023"


def exact_mip(nodes, pods) -> int:
    """Most GPU milli any placement allocates (scipy milp, HiGHS): ``y[i, j]`` pod i on node j,
    ``x[i, j, k]`` pod i holds card k of node j (num_gpu distinct cards; a whole card alone, sharing
    milli within 1,000 per card), CPU and memory per node, the model allowed."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    var: dict[tuple, int] = {}
    for i, p in enumerate(pods):
        for j, n in enumerate(nodes):
            if p.gpu and offline._fits_alone(
                (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models),
                (n.cpu_milli, n.memory_mib, n.gpus, n.model),
            ):
                var[(i, j)] = len(var)
                for k in range(n.gpus):
                    var[(i, j, k)] = len(var)
    if not var:
        return 0
    rows: list[tuple[dict[int, float], float]] = []  # coefficients ≤ upper
    for i in range(len(pods)):
        rows.append(({v: 1.0 for key, v in var.items() if len(key) == 2 and key[0] == i}, 1.0))
    for (i, j, *_rest), v in list(var.items()):
        if _rest:
            continue
        cards = {var[(i, j, k)]: 1.0 for k in range(nodes[j].gpus)}
        rows.append(({**cards, v: -float(pods[i].num_gpu)}, 0.0))
        rows.append(({**{c: -1.0 for c in cards}, v: float(pods[i].num_gpu)}, 0.0))
    for j, n in enumerate(nodes):
        on = [(i, v) for (i, jj, *rest), v in var.items() if jj == j and not rest]
        rows.append(({v: float(pods[i].cpu_milli) for i, v in on}, float(n.cpu_milli)))
        rows.append(({v: float(pods[i].memory_mib) for i, v in on}, float(n.memory_mib)))
        for k in range(n.gpus):
            card = {
                v: float(min(pods[i].gpu_milli, 1000))
                for (i, jj, *rest), v in var.items()
                if rest == [k] and jj == j
            }
            rows.append((card, 1000.0))
    a = np.zeros((len(rows), len(var)))
    for r, (coef, _ub) in enumerate(rows):
        for v, c in coef.items():
            a[r, v] = c
    c = np.zeros(len(var))
    for key, v in var.items():
        if len(key) == 2:
            c[v] = -float(pods[key[0]].gpu)
    res = milp(
        c,
        constraints=LinearConstraint(a, -np.inf, [u for _c, u in rows]),
        integrality=np.ones(len(var)),
        bounds=Bounds(0, 1),
    )
    assert res.status == 0, res.message
    return int(round(-res.fun))


@cache
def trace(name: str):
    return trace_replay.load_nodes(TRACE / "openb_node_list_gpu_node.csv.gz"), [
        p for p in trace_replay.load_pods(TRACE / f"openb_pod_list_{name}.csv.gz") if p.gpu
    ]


def sampled_instance(rng: random.Random, variant: str, cpu_div: int, mem_div: int = 1):
    """1–2 trace nodes (cards capped at 4, CPU and memory scaled with them, CPU ÷ ``cpu_div``, memory ÷
    ``mem_div``) and trace pods drawn until they ask 1.2 × the cards."""
    all_nodes, all_pods = trace(variant)
    nodes = []
    for i in range(rng.randint(1, 2)):
        n = rng.choice(all_nodes)
        cards = min(n.gpus, rng.randint(1, 4))
        nodes.append(
            NodeSpec(
                f"n{i}",
                n.cpu_milli * cards // n.gpus // cpu_div,
                n.memory_mib * cards // n.gpus // mem_div,
                cards,
                n.model,
            )
        )
    pods, asked = [], 0
    while asked < 1.2 * 1000 * sum(n.gpus for n in nodes) and len(pods) < 12:
        p = rng.choice(all_pods)
        pods.append(PodSpec(f"p{len(pods)}", p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models))
        asked += p.gpu
    return nodes, pods


def test_cpu_binding_node_is_bounded_exactly():
    # the case: the card-pattern LP splits the node's CPU and says 2.79 % unallocated; one pod fits
    nodes = [NodeSpec("n", 26_000, 65_536, 2, "T4")]
    pods = [PodSpec("a", 24_200, 1024, 1, 1000), PodSpec("b", 3_152, 1024, 1, 1000)]
    assert offline.card_lp_bound(nodes, pods)["allocated"] == pytest.approx(2000 * (1 - 0.0279), abs=1.0)
    got = node_bound.node_lp_bound(nodes, pods)
    assert got["status"] == "optimal" and got["allocated"] == pytest.approx(1000)
    assert exact_mip(nodes, pods) == 1000


def test_multi_card_sharing_pod_needs_distinct_cards_in_the_node_bound():
    nodes = [NodeSpec("n", 32_000, 65_536, 2, "T4")]
    assert node_bound.node_lp_bound(nodes, [PodSpec("p", 1000, 1024, 3, 650)])["allocated"] == 0
    pods = [PodSpec("m", 1000, 1024, 2, 650)] + [PodSpec(f"s{i}", 1000, 1024, 1, 300) for i in range(4)]
    assert node_bound.node_lp_bound(nodes, pods)["allocated"] == pytest.approx(1900) == exact_mip(nodes, pods)


FAMILIES = [
    ("default", 1),
    ("default", 4),
    ("cpu250", 1),
    ("gpushare100", 1),
    ("gpuspec33", 2),
    ("multigpu50", 4),
    ("cpu250", 3),  # CPU binds
    ("gpushare100", 1, 8),  # memory binds
]


@pytest.mark.parametrize("family", FAMILIES)
def test_node_bound_is_valid_and_tighter_on_trace_sampled_instances(family):
    rng = random.Random(100 + FAMILIES.index(family))
    gaps_node, gaps_card = [], []
    for _ in range(6):
        nodes, pods = sampled_instance(rng, *family)
        opt = exact_mip(nodes, pods)
        node = node_bound.node_lp_bound(nodes, pods)
        card = offline.card_lp_bound(nodes, pods)["allocated"]
        assert node["status"] == "optimal"
        assert node["allocated"] >= opt - 1e-6
        assert card >= opt - 1e-6
        packed = offline.hindsight(
            lambda nodes=nodes: trace_replay.build_snapshot(nodes),
            pods,
            trace_replay.to_request,
            time_limit=0.2,
        )
        assert packed["allocated"] <= opt
        gaps_node.append(min(node["allocated"], card) - opt)
        gaps_card.append(card - opt)
    assert sum(gaps_node) <= sum(gaps_card) + 1e-6


def test_stopped_column_generation_is_still_a_valid_bound():
    rng = random.Random(7)
    for _ in range(4):
        nodes, pods = sampled_instance(rng, "default", 4)
        opt = exact_mip(nodes, pods)
        stopped = node_bound.node_lp_bound(nodes, pods, time_limit=0.0)
        assert stopped["rounds"] <= 1  # one pricing round at the first master's duals (0: nothing fits)
        assert stopped["allocated"] >= opt - 1e-6
        assert stopped["allocated"] >= node_bound.node_lp_bound(nodes, pods)["allocated"] - 1e-6


def test_memory_binding_node_is_bounded_exactly():
    nodes = [NodeSpec("n", 64_000, 65_536, 2, "T4")]
    pods = [PodSpec("a", 1000, 40_000, 1, 1000), PodSpec("b", 1000, 30_000, 1, 1000)]
    assert offline.card_lp_bound(nodes, pods)["allocated"] > 1800  # the LP splits memory across the class
    got = node_bound.node_lp_bound(nodes, pods)
    assert got["status"] == "optimal" and got["allocated"] == pytest.approx(1000) == exact_mip(nodes, pods)


@pytest.mark.parametrize(
    "pods",
    [
        # a whole card beside three 300-milli slices on the other card: one node holds 7 pods worth 1,900
        [PodSpec(f"s{i}", 1000, 1024, 1, 300) for i in range(6)] + [PodSpec("w", 1000, 1024, 1, 1000)],
        # three pods of 2 × 300 milli share both cards: 1,800
        [PodSpec(f"m{i}", 1000, 1024, 2, 300) for i in range(3)],
    ],
)
def test_a_node_holds_more_sharing_pods_of_a_type_than_it_has_cards(pods):
    # the pricing once capped a type at cards ÷ num pods per node, a bound below the optimum (1,800, 600)
    nodes = [NodeSpec("n", 32_000, 65_536, 2, "T4")]
    opt = exact_mip(nodes, pods)
    assert opt == (1900 if len(pods) == 7 else 1800)
    for limit in (0.0, 60.0):
        assert node_bound.node_lp_bound(nodes, pods, time_limit=limit)["allocated"] >= opt - 1e-6
    assert node_bound.node_lp_bound(nodes, pods)["allocated"] == pytest.approx(opt)


def test_every_master_column_fits_its_node_so_the_master_value_is_a_point_of_the_lp():
    rng = random.Random(11)
    for _ in range(4):
        nodes, pods = sampled_instance(rng, "gpushare100", 2)
        types = offline._pod_types(pods)
        classes = [(key, len(ns)) for key, ns in offline._node_classes(nodes)]
        lp = node_bound._NodeLP(types, classes)
        mix = offline.card_lp_bound(nodes, pods)["class_mix"]
        for c, (ckey, size) in enumerate(classes):  # the card LP's pods first-fit, as node_lp_bound seeds
            want = {t: int(x + 1e-6) for t, x in mix[c].items()}
            for _room, _free, counts in node_bound.first_fit(ckey, types, want, size):
                lp.add(c, counts)
        bound, lp_value, _converged = lp.solve(float(sum(p.gpu for p in pods)), 1e18, 10.0)
        assert lp_value <= bound + 1e-6
        assert bound >= exact_mip(nodes, pods) - 1e-6
        for c, counts in lp.columns:
            node = next(n for n in nodes if (n.cpu_milli, n.memory_mib, n.gpus, n.model) == classes[c][0])
            one = [PodSpec(f"p{t}.{i}", *types[t][0]) for t, q in counts.items() for i in range(q)]
            assert exact_mip([node], one) == sum(p.gpu for p in one)  # all of them fit one node


def test_greedy_packings_fit_and_prefer_what_the_prices_leave_worth():
    # 96,000 mCPU, 8 cards: at prices that make the CPU-heavy pod worth little, the greedy fills the node
    # with the light ones; whatever it returns fits (CPU, memory, cards)
    ckey = (96_000, 393_216, 8, "G2")
    types = [((32_000, 1024, 1, 1000, frozenset()), 10), ((4_000, 1024, 1, 500, frozenset()), 40)]
    caps = {t: node_bound.alone_count(ckey, types[t]) for t in range(2)}
    assert caps == {0: 3, 1: 16}
    found = node_bound.greedy_patterns(ckey, types, caps, {0: 100.0, 1: 450.0})
    best = max(found, key=lambda counts: 100.0 * counts.get(0, 0) + 450.0 * counts.get(1, 0))
    assert best == {1: 16}
    for counts in found:
        assert sum(types[t][0][0] * q for t, q in counts.items()) <= 96_000
        assert sum(types[t][0][2] * min(types[t][0][3], 1000) * q for t, q in counts.items()) <= 8000


def test_stopped_at_the_card_lp_prices_the_bound_is_never_above_the_card_lp():
    rng = random.Random(5)
    for _ in range(4):
        nodes, pods = sampled_instance(rng, "cpu250", 2)
        card = offline.card_lp_bound(nodes, pods)
        stopped = node_bound.node_lp_bound(
            nodes, pods, time_limit=0.0, type_duals=card["type_duals"], class_mix=card["class_mix"]
        )
        assert exact_mip(nodes, pods) - 1e-6 <= stopped["allocated"] <= card["allocated"] + 1e-6
        assert stopped["lp_value"] <= stopped["allocated"] + 1e-6
