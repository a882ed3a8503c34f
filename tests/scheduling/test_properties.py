"""Property tests: for random fleets and request sequences the engine never breaks an invariant.

* no card ever exceeds its memory, or its compute (hard slices ≤ 100 %, shared slices ≤ 100 % × the
  pool's overcommit factor of what the hard slices leave);
* a whole card is never shared;
* multi-device, multi-group and multi-replica requests are all or nothing: a decision either places
  every device of every replica or leaves the snapshot exactly as it was.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.scheduling.engine import (
    DeviceGroup,
    DeviceState,
    Engine,
    Isolation,
    NodeState,
    PoolInfo,
    Request,
    Snapshot,
    TopologyPolicy,
    policy_names,
)

GiB = 1024
KINDS = (("gpu", "nvidia", "A100"), ("gpu", "nvidia", "L40S"), ("npu", "huawei", "Ascend-910B"))


@st.composite
def fleets(draw):
    pools = [PoolInfo("train"), PoolInfo("infer", overcommit_pct=draw(st.integers(100, 150)))]
    snap = Snapshot(pools=pools)
    for n in range(draw(st.integers(1, 5))):
        kind, vendor, model = draw(st.sampled_from(KINDS))
        n_dev = draw(st.integers(1, 8))
        memory = draw(st.sampled_from([0, 16 * GiB, 40 * GiB, 80 * GiB]))
        devices = []
        for i in range(n_dev):
            devices.append(
                DeviceState(
                    f"n{n}/d{i}",
                    i,
                    kind=kind,
                    vendor=vendor,
                    model=model,
                    memory_mib=memory,
                    topology_group=f"n{n}-c{i // 4}" if draw(st.booleans()) else "",
                    pcie_switch=f"n{n}-s{i // 2}",
                    numa_node=i // 4,
                    healthy=draw(st.integers(0, 9)) > 0,
                )
            )
        snap.add_node(
            NodeState(
                f"n{n}",
                cpu_milli=draw(st.sampled_from([8_000, 32_000, 96_000])),
                memory_mib=draw(st.sampled_from([64 * GiB, 512 * GiB])),
                devices=devices,
                pool=draw(st.sampled_from(["train", "infer"])),
                switch=f"leaf-{n % 2}",
            )
        )
    return snap


@st.composite
def groups(draw):
    kind, _vendor, model = draw(st.sampled_from(KINDS + ((None, None, None),)))
    models = frozenset([model]) if model and draw(st.booleans()) else frozenset()
    if draw(st.booleans()):
        return DeviceGroup(count=draw(st.integers(1, 4)), whole=True, kind=kind, models=models)
    return DeviceGroup(
        count=draw(st.integers(1, 2)),
        whole=False,
        compute=draw(st.integers(1, 1000)),
        memory_mib=draw(st.sampled_from([0, 1 * GiB, 8 * GiB, 20 * GiB, 50 * GiB])),
        isolation=draw(st.sampled_from([Isolation.HARD, Isolation.SHARED])),
        kind=kind,
        models=models,
    )


@st.composite
def requests(draw, n: int):
    out = []
    for i in range(n):
        gs = tuple(draw(st.lists(groups(), min_size=0, max_size=2)))
        out.append(
            Request(
                f"r{i}",
                cpu_milli=draw(st.sampled_from([0, 1_000, 4_000, 16_000])),
                memory_mib=draw(st.sampled_from([0, 8 * GiB, 32 * GiB])),
                groups=gs,
                replicas=draw(st.sampled_from([1, 1, 1, 2, 3])),
                topology=draw(
                    st.sampled_from(
                        [
                            TopologyPolicy(),
                            TopologyPolicy("sameNode", "sameSwitch"),
                            TopologyPolicy("sameSwitch"),
                        ]
                    )
                ),
            )
        )
    return out


def fingerprint(snap: Snapshot) -> tuple:
    return tuple(
        (
            n.cpu_used,
            n.mem_used,
            tuple(
                (d.mem_used, d.hard_used, d.shared_used, d.whole_by, tuple(sorted(d.slices)))
                for d in n.devices
            ),
        )
        for n in snap.nodes
    )


def check_placement(snap: Snapshot, req: Request, decision) -> None:
    placement = decision.placement
    if not decision.placed:
        return
    replicas = {p.replica for p in placement.parts}
    assert replicas == set(range(req.replicas))
    for r in range(req.replicas):
        parts = [p for p in placement.parts if p.replica == r]
        assert sum(p.cpu_milli for p in parts) == req.cpu_milli
        for k, g in enumerate(req.groups):
            got = [d for p in parts for d in p.devices if d.group == k]
            assert len(got) == g.count, "every device of every group, or nothing"
            assert len({(p.node, d.device_id) for p in parts for d in p.devices if d.group == k}) == g.count
            for d in got:
                assert d.whole == g.whole
                if not g.whole:
                    assert (d.compute, d.memory_mib, d.isolation) == (g.compute, g.memory_mib, g.isolation)
        if len(req.groups) > 1 and not placement.cross_node:
            assert len({p.node for p in parts}) == 1


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    snap=fleets(),
    reqs=requests(12),
    policy=st.sampled_from(policy_names()),
    seed=st.integers(0, 3),
    release_mask=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_random_fleets_and_requests_never_break_an_invariant(snap, reqs, policy, seed, release_mask):
    engine = Engine(policy, seed=seed)
    placed = []
    for req, release in zip(reqs, release_mask, strict=True):
        before = fingerprint(snap)
        decision = engine.place(snap, req)
        if decision.placed:
            check_placement(snap, req, decision)
            placed.append(req.id)
        else:
            assert fingerprint(snap) == before, "a failed decision must leave the snapshot untouched"
            assert decision.explanation
        assert snap.check_invariants() == []
        if release and placed:
            engine.release(snap, placed.pop(0))
            assert snap.check_invariants() == []
    for rid in placed:
        engine.release(snap, rid)
    assert all(n.cpu_used == 0 and n.mem_used == 0 for n in snap.nodes)
    assert all(
        d.empty and d.mem_used == d.hard_used == d.shared_used == 0 for n in snap.nodes for d in n.devices
    )


@settings(max_examples=100, deadline=None)
@given(
    memory=st.sampled_from([0, 16 * GiB, 80 * GiB]),
    factor=st.integers(100, 150),
    slices=st.lists(
        st.tuples(
            st.integers(1, 1000),
            st.sampled_from([0, 1 * GiB, 6 * GiB, 30 * GiB]),
            st.sampled_from([Isolation.HARD, Isolation.SHARED]),
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_one_card_never_exceeds_memory_or_compute(memory, factor, slices):
    snap = Snapshot(
        [
            NodeState(
                "n",
                cpu_milli=1_000_000,
                memory_mib=1_000_000,
                devices=[DeviceState("n/d0", 0, memory_mib=memory)],
                pool="p",
            )
        ],
        pools=[PoolInfo("p", overcommit_pct=factor)],
    )
    engine = Engine("bestfit", seed=0)
    hard = shared = mem = 0
    for i, (compute, mib, iso) in enumerate(slices):
        decision = engine.place(
            snap,
            Request(
                f"s{i}", groups=(DeviceGroup(whole=False, compute=compute, memory_mib=mib, isolation=iso),)
            ),
        )
        fits = mem + mib <= memory and (
            (hard + compute) * factor + shared * 100 <= 1000 * factor
            if iso == Isolation.HARD
            else hard * factor + (shared + compute) * 100 <= 1000 * factor
        )
        assert decision.placed == fits
        if fits:
            mem += mib
            hard += compute if iso == Isolation.HARD else 0
            shared += compute if iso == Isolation.SHARED else 0
        dev = snap.node("n").devices[0]
        assert dev.mem_used <= memory
        assert dev.hard_used <= 1000
        assert dev.hard_used * factor + dev.shared_used * 100 <= 1000 * factor
    whole = engine.place(snap, Request("whole", groups=(DeviceGroup(count=1),)))
    assert whole.placed == (hard == shared == mem == 0)
