"""Suanchi's slot-fragmentation policy where CPU binds before the accelerators do (issue 31 §1).

The stranded-compute term assumes a node's free CPU is there for accelerator pods at their average
CPU per card. When the workload asks for at least as much CPU per card as the fleet has (its CPU-only
pods included), that premise fails and requests are scored by the slot measure alone.
"""

from __future__ import annotations

import pytest

from apps.scheduling.engine import DeviceGroup, DeviceState, Engine, NodeState, Request, Snapshot, assign
from apps.scheduling.engine.frag import FragModel, Shape
from apps.scheduling.engine.policies import SlotFragPolicy

GPU_POD = Request("g", cpu_milli=5_000, groups=(DeviceGroup(count=1, kind="gpu"),))
CPU_POD = Request("c", cpu_milli=4_000)
BIG_GPU_POD = Request("b", cpu_milli=10_000, groups=(DeviceGroup(count=1, kind="gpu"),))
PLENTY = [GPU_POD, GPU_POD]  # 5 cores per card asked, 6 in the fleet
SCARCE = [GPU_POD, GPU_POD, CPU_POD, CPU_POD]  # (10 + 8) cores / 2 cards = 9 per card


def fleet() -> Snapshot:
    # 2 cards and 12 cores: 6 cores per card
    devices = [DeviceState(f"n/gpu{i}", i, kind="gpu", model="T4") for i in range(2)]
    return Snapshot([NodeState("n", cpu_milli=12_000, memory_mib=64_000, devices=devices)])


def score(workload: list[Request], req: Request, bind_first: bool = True) -> tuple[bool, float]:
    snap = fleet()
    policy = SlotFragPolicy()
    if bind_first:
        policy.bind(snap)
    policy.set_workload(workload)
    if not bind_first:
        version = policy.version
        policy.bind(snap)
        assert policy.version > version  # the scores cached before the fleet was known are stale
    node = snap.nodes[0]
    opts = assign.options(node, req, ((0, 1),) if req.groups else ((),), node.factor)
    key, _k = policy.score(snap, node, req, opts, None)
    return policy.scarce_cpu, key[0]


# The CPU-only pod leaves 8 cores: one GPU pod of 5 cores fits where two did (1,000 milli lost to the
# slot measure), and 8 cores feed 1,600 milli at 5 per milli-card (400 stranded, weight 4). The big GPU
# pod leaves one card and 2 cores: no GPU pod fits (1,000 lost), 2 cores feed 400 (600 stranded).
@pytest.mark.parametrize(
    ("req", "stranded"), [(CPU_POD, 400), (BIG_GPU_POD, 600)], ids=["cpu-only", "accelerator"]
)
@pytest.mark.parametrize("bind_first", [True, False], ids=["bound-first", "workload-first"])
def test_the_stranded_term_counts_only_while_cpu_is_not_scarce(req, stranded, bind_first):
    assert score(PLENTY, req, bind_first) == (False, pytest.approx(-(1000 + 4 * stranded)))
    assert score(SCARCE, req, bind_first) == (True, pytest.approx(-1000))


def test_a_live_fleet_learns_the_scarcity_from_the_requests_it_sees():
    snap = fleet()
    engine = Engine("slotfrag", seed=1, explain=False, top_k=0)
    policy = engine.policy
    for n in range(64):  # the model is rebuilt after 64 requests
        req = Request(f"c{n}", cpu_milli=4_000) if n % 2 else GPU_POD
        engine.place(snap, Request(f"r{n}", cpu_milli=req.cpu_milli, groups=req.groups), commit=False)
    assert policy.scarce_cpu  # (32 × 5 + 32 × 4 cores) / 32 cards asked: 9 per card, 6 in the fleet


def test_the_measure_without_its_stranded_part():
    model = FragModel([(Shape(cpu_milli=4_000, count=1), 1.0)], "slots", strand_cpu=(1.0, 8.0))
    key = model.key((("gpu", "", ""),), 8_000, 0, [(0, 1000, 0, True)] * 8)
    # 8 cards, CPU for 2 pods of the shape: 6 cards unusable by it, and 7 stranded at 8 cores per card
    assert model.value(key) == pytest.approx(6000 + 7000)
    assert model.value(key, strand=False) == pytest.approx(6000)
