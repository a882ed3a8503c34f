"""The card-level configuration LP bound of the offline references (engine/offline.py, issue 20 item 7):
valid (never below the exact optimum, computed here by exhaustive search on small instances), never
looser than the aggregated LP, strictly tighter where the sharing rule bites, and still valid when
column generation is stopped early."""

from __future__ import annotations

import random
from functools import cache
from itertools import combinations

import pytest

from apps.scheduling.engine import offline, trace_replay
from apps.scheduling.engine.trace_replay import NodeSpec, PodSpec


def pod(name, num, milli, cpu=1000, mem=1024, models=()):
    return PodSpec(name, cpu, mem, num, milli, frozenset(models))


def exact_optimum(nodes, pods) -> int:
    """Most GPU milli any placement allocates: every pod placed or left out, exhaustively (memoised on
    the fleet's state with each node's cards sorted, which are interchangeable)."""
    start = tuple((n.cpu_milli, n.memory_mib, tuple([1000] * n.gpus)) for n in nodes)
    models = [n.model for n in nodes]

    @cache
    def best(k: int, state: tuple) -> int:
        if k == len(pods):
            return 0
        p = pods[k]
        value = best(k + 1, state)  # left out
        if p.gpu == 0:
            return value
        for i, (cpu, mem, cards) in enumerate(state):
            if cpu < p.cpu_milli or mem < p.memory_mib or (p.models and models[i] not in p.models):
                continue
            options = set()
            if p.gpu_milli >= 1000:
                empty = [j for j, f in enumerate(cards) if f == 1000]
                for chosen in combinations(empty, p.num_gpu):
                    options.add(tuple(0 if j in chosen else f for j, f in enumerate(cards)))
            else:  # a sharing pod takes gpu_milli on each of num_gpu distinct cards
                room = [j for j, f in enumerate(cards) if f >= p.gpu_milli]
                for chosen in combinations(room, p.num_gpu):
                    options.add(tuple(f - p.gpu_milli if q in chosen else f for q, f in enumerate(cards)))
            for after in options:
                nxt = list(state)
                nxt[i] = (cpu - p.cpu_milli, mem - p.memory_mib, tuple(sorted(after)))
                value = max(value, p.gpu + best(k + 1, tuple(nxt)))
        return value

    return best(0, start)


def random_instance(rng: random.Random):
    nodes = [
        NodeSpec(
            f"n{i}", rng.choice((4000, 8000, 16000)), 65_536, rng.randint(1, 3), rng.choice(("T4", "V100"))
        )
        for i in range(rng.randint(1, 3))
    ]
    pods = []
    for i in range(rng.randint(3, 7)):
        if rng.random() < 0.35:
            num, milli = rng.randint(1, 2), 1000
        else:
            num, milli = 1, rng.choice((160, 230, 320, 470, 470, 550, 650, 810))
        models = rng.choice(((), (), ("T4",), ("V100",)))
        pods.append(pod(f"p{i}", num, milli, cpu=rng.choice((1000, 2000, 4000, 6000)), models=models))
    return nodes, pods


@pytest.mark.parametrize("case", range(40))
def test_bound_is_at_least_the_exact_optimum_which_is_at_least_hindsight(case):
    nodes, pods = random_instance(random.Random(1000 + case))
    opt = exact_optimum(nodes, pods)
    card = offline.card_lp_bound(nodes, pods)
    assert card["status"] == "optimal"
    assert card["allocated"] >= opt - 1e-6
    assert card["allocated"] <= offline.lp_bound(nodes, pods)["allocated"] + 1e-6  # never looser
    packed = offline.hindsight(
        lambda: trace_replay.build_snapshot(nodes), pods, trace_replay.to_request, time_limit=0.2
    )
    assert packed["allocated"] <= opt


@pytest.mark.parametrize("case", range(20))
def test_multi_card_sharing_pods_take_distinct_cards_everywhere(case):
    # pods asking 2-3 cards at less than a card each: hindsight must hold them on that many cards
    rng = random.Random(5000 + case)
    nodes, pods = random_instance(rng)
    pods += [pod(f"m{i}", rng.randint(2, 3), rng.choice((230, 470, 650))) for i in range(rng.randint(1, 3))]
    opt = exact_optimum(nodes, pods)
    assert offline.card_lp_bound(nodes, pods)["allocated"] >= opt - 1e-6
    assert offline.lp_bound(nodes, pods)["allocated"] >= opt - 1e-6
    packed = offline.hindsight(
        lambda: trace_replay.build_snapshot(nodes), pods, trace_replay.to_request, time_limit=0.2
    )
    assert packed["allocated"] <= opt


def test_bound_is_the_optimum_where_the_aggregated_lp_is_loose():
    # two cards: 810 + 810 + 470 + 470 = 2,560 milli of requests. The aggregated LP fills both cards
    # (2,000); on cards, an 810 leaves room for nothing here, so the best is (810) and (470, 470).
    nodes = [NodeSpec("n", 32_000, 65_536, 2, "T4")]
    pods = [pod("a", 1, 810), pod("b", 1, 810), pod("c", 1, 470), pod("d", 1, 470)]
    assert offline.lp_bound(nodes, pods)["allocated"] == pytest.approx(2000)
    card = offline.card_lp_bound(nodes, pods)
    assert card["allocated"] == pytest.approx(1750)
    assert exact_optimum(nodes, pods) == 1750
    packed = offline.hindsight(lambda: trace_replay.build_snapshot(nodes), pods, trace_replay.to_request)
    # greedy packs the 810s first (1,620); the card re-pack swaps one for the two 470s left out
    assert packed["greedy_allocated"] == 1620
    assert packed["allocated"] == 1750


def test_cpu_memory_and_models_still_bound_the_card_lp():
    nodes = [NodeSpec("a", 8_000, 16_384, 4, "T4"), NodeSpec("b", 64_000, 262_144, 2, "V100")]
    pods = [
        pod("v", 2, 1000, models={"V100"}),
        pod("v2", 2, 1000, models={"V100"}),
        pod("cpu-heavy", 1, 1000, cpu=16_000),
        pod("t", 1, 1000),
        pod("s1", 1, 300, cpu=4_000),
        pod("s2", 1, 300, cpu=4_000),  # node a's CPU: "t" and one of the two sharing pods
    ]
    card = offline.card_lp_bound(nodes, pods)
    opt = exact_optimum(nodes, pods)
    assert opt == 3300
    assert card["allocated"] >= opt - 1e-6
    assert card["allocated"] < offline.lp_bound(nodes, pods)["allocated"] + 1e-6


def test_stopped_column_generation_still_bounds_the_optimum():
    # many milli values: the first restricted LP (one value per card) is far from the card LP, so the
    # bound after one round is the raised-card-price dual value, which must still bound the optimum
    nodes = [NodeSpec("n0", 64_000, 262_144, 3, "T4"), NodeSpec("n1", 64_000, 262_144, 2, "T4")]
    millis = (810, 650, 470, 320, 230, 160, 160, 320, 550, 470)
    pods = [pod(f"p{i}", 1, m) for i, m in enumerate(millis)]
    stopped = offline.card_lp_bound(nodes, pods, time_limit=0.0)
    full = offline.card_lp_bound(nodes, pods)
    assert stopped["status"] == "time limit" and stopped["rounds"] == 1
    assert full["status"] == "optimal" and full["rounds"] > 1
    opt = exact_optimum(nodes, pods)
    assert stopped["allocated"] >= full["allocated"] - 1e-6 >= opt - 2e-6
    assert stopped["lp_value"] < full["lp_value"]  # the first restricted LP had not reached the LP


def test_offline_once_reports_the_card_bound_tighter_than_the_aggregate(tmp_path):
    (tmp_path / "n.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},32000,131072,2,T4\n" for i in range(6))
    )
    rows = [f"p{i},2000,4096,1,{(810, 470, 650)[i % 3]}" for i in range(30)]
    (tmp_path / "p.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "\n".join(rows) + "\n")
    nodes = trace_replay.load_nodes(tmp_path / "n.csv")
    pods = trace_replay.load_pods(tmp_path / "p.csv")
    r = trace_replay.offline_once(nodes, pods, 1, time_limit=0.5)
    # arrived: 8 × 470, 7 × 650, 4 × 810 on 12 cards. The aggregated LP only sees the 650s and 810s take
    # a card each (3.75 % idle); on cards nothing pairs with them here (470 + 650 > 1000), so the best is
    # 4 × (470, 470), 4 × 810 and 4 × 650: 9,600 of 12,000 milli (20 % idle)
    assert r["bound_aggregate"] == pytest.approx(3.75)
    assert r["bound"] == pytest.approx(20.0)
    assert r["hindsight_greedy"] > r["bound"] + 1.0
    assert r["hindsight"] == pytest.approx(r["bound"])  # the re-pack reaches the bound, so both are exact
