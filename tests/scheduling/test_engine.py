"""The placement engine (pure Python): filters and reasons, topology, slices, gangs, fallbacks, traces."""

from __future__ import annotations

import pytest

from apps.scheduling.engine import (
    CapacityError,
    DeviceAssignment,
    DeviceGroup,
    DeviceState,
    Engine,
    Isolation,
    NodePart,
    NodeState,
    NodeStatus,
    Placement,
    PoolInfo,
    Request,
    Snapshot,
    Taint,
    Toleration,
    Topology,
    TopologyPolicy,
    assign,
    explain,
    policy_names,
)

GiB = 1024


def gpus(
    node: str,
    n: int = 8,
    *,
    model: str = "A100-SXM4-80GB",
    vendor: str = "nvidia",
    kind: str = "gpu",
    memory: int = 80 * GiB,
    features=("rdma",),
    **topo,
) -> list[DeviceState]:
    out = []
    for i in range(n):
        extra = {key: (value(i) if callable(value) else value) for key, value in topo.items()}
        out.append(
            DeviceState(
                f"{node}/{kind}{i}",
                i,
                kind=kind,
                vendor=vendor,
                model=model,
                memory_mib=memory,
                features=features,
                **extra,
            )
        )
    return out


def node(name: str, devices=None, *, cpu: int = 64_000, mem: int = 512 * GiB, **kw) -> NodeState:
    return NodeState(
        name, cpu_milli=cpu, memory_mib=mem, devices=devices if devices is not None else gpus(name), **kw
    )


def whole(count: int = 1, **kw) -> DeviceGroup:
    return DeviceGroup(count=count, whole=True, **kw)


def hard_slice(compute: int, memory: int, **kw) -> DeviceGroup:
    return DeviceGroup(
        count=1, whole=False, compute=compute, memory_mib=memory, isolation=Isolation.HARD, **kw
    )


def shared_slice(compute: int, memory: int = 0, **kw) -> DeviceGroup:
    return DeviceGroup(
        count=1, whole=False, compute=compute, memory_mib=memory, isolation=Isolation.SHARED, **kw
    )


def devices_of(decision) -> list[str]:
    return [d.device_id for part in decision.placement.parts for d in part.devices]


def occupy(snap: Snapshot, node_name: str, *indexes: int) -> None:
    n = snap.node(node_name)
    for i in indexes:
        dev = n.devices[i]
        snap.apply(
            Placement(
                f"pre-{node_name}-{i}",
                (
                    NodePart(
                        node_name,
                        0,
                        0,
                        (DeviceAssignment(dev.id, dev.index, 0, True, dev.memory_mib, 1000, Isolation.HARD),),
                    ),
                ),
            )
        )


# ---- tier 1: filter reasons and the explanation ------------------------------------------------------


def test_every_rejected_node_gets_a_reason_and_the_explanation_counts_them():
    snap = Snapshot(pools=[PoolInfo("reserved", owner_project="vision")])
    snap.add_node(node("ready-small", cpu=2_000))
    snap.add_node(node("maint", status=NodeStatus.MAINTENANCE))
    snap.add_node(node("quar", status=NodeStatus.QUARANTINED))
    snap.add_node(
        node(
            "npu",
            gpus("npu", kind="npu", vendor="huawei", model="Ascend-910B"),
            taints=[Taint("accelerator", "huawei-npu")],
        )
    )
    snap.add_node(node("owned", pool="reserved"))
    snap.add_node(node("other-label", labels={"zone": "b"}))
    snap.add_node(node("no-rdma", gpus("no-rdma", features=())))
    snap.add_node(node("bad-driver"))
    req = Request(
        "job",
        cpu_milli=8_000,
        groups=(whole(2, kind="gpu", features={"rdma"}),),
        project="nlp",
        node_selector={"zone": "a"},
        precheck_failures={"bad-driver": "CUDA 12.4 needs driver >= 550"},
    )
    # every node but other-label / ready-small has zone a
    for n in snap.nodes:
        if n.name != "other-label":
            n.labels["zone"] = "a"
    snap.static_changed()

    decision = Engine("bestfit", seed=1).place(snap, req)

    assert not decision.placed
    assert decision.rejections == {
        "ready-small": "insufficient cpu",
        "maint": "node in maintenance",
        "quar": "node quarantined",
        "npu": "untolerated taint accelerator=huawei-npu",
        "owned": "pool reserved for another project",
        "other-label": "node selector mismatch",
        "no-rdma": "missing required feature rdma",
        "bad-driver": "runtime precheck failed: CUDA 12.4 needs driver >= 550",
    }
    assert decision.explanation.startswith(
        "0/8 nodes are available: 1 insufficient cpu, 1 missing required feature rdma,"
    )
    assert "1 untolerated taint accelerator=huawei-npu" in decision.explanation
    assert decision.explanation.endswith(".")


def test_explanation_orders_reasons_by_count_like_kube_scheduler():
    text = explain(
        40,
        ["insufficient device memory"] * 12
        + ["untolerated taint accelerator=huawei-npu"] * 8
        + ["node quarantined"] * 20,
    )
    assert text == (
        "0/40 nodes are available: 20 node quarantined, 12 insufficient device memory, "
        "8 untolerated taint accelerator=huawei-npu."
    )


def test_tolerations_and_device_type_reasons():
    snap = Snapshot(
        [
            node(
                "npu",
                gpus("npu", kind="npu", vendor="huawei", model="Ascend-910B"),
                taints=[Taint("accelerator", "huawei-npu")],
            )
        ]
    )
    engine = Engine("binpack", seed=1)
    wants_gpu = Request(
        "a", groups=(whole(1, kind="gpu"),), tolerations=(Toleration("accelerator", "Exists"),)
    )
    assert engine.place(snap, wants_gpu).rejections == {"npu": "no gpu"}
    wants_npu = Request(
        "b",
        groups=(whole(1, kind="npu", vendors={"huawei"}),),
        tolerations=(Toleration("accelerator", value="huawei-npu"),),
    )
    assert engine.place(snap, wants_npu).placed
    untolerated = Request("c", groups=(whole(1, kind="npu"),))
    assert (
        engine.place(snap, untolerated).explanation
        == "0/1 nodes are available: 1 untolerated taint accelerator=huawei-npu."
    )


def test_unhealthy_and_project_owned_devices_are_not_used():
    devs = gpus("n", 2)
    devs[0].healthy = False
    devs[1].owner_project = "vision"
    snap = Snapshot([node("n", devs)])
    engine = Engine("bestfit", seed=1)
    assert engine.place(snap, Request("a", groups=(whole(1),), project="nlp")).rejections == {
        "n": "matching devices reserved for another project"
    }
    placed = engine.place(snap, Request("b", groups=(whole(1),), project="vision"))
    assert devices_of(placed) == ["n/gpu1"]
    snap.set_device_health("n", "n/gpu1", healthy=False)
    assert engine.place(snap, Request("c", groups=(whole(1),), project="vision")).rejections == {
        "n": "matching devices unhealthy or not schedulable"
    }


def test_capacity_reasons_for_slices():
    snap = Snapshot([node("n", gpus("n", 1, memory=16 * GiB))])
    engine = Engine("bestfit", seed=1)
    assert engine.place(snap, Request("a", groups=(hard_slice(600, 8 * GiB),))).placed
    assert engine.place(snap, Request("b", groups=(hard_slice(300, 12 * GiB),))).rejections == {
        "n": "insufficient device memory"
    }
    assert engine.place(snap, Request("c", groups=(hard_slice(500, 4 * GiB),))).rejections == {
        "n": "insufficient device compute"
    }
    assert engine.place(snap, Request("d", groups=(whole(1),))).rejections == {"n": "insufficient free cards"}


# ---- tier 3: topology ------------------------------------------------------------------------------


def nvlink_node(name: str = "dgx") -> NodeState:
    """8 GPUs in two NVLink cliques of four (0-3, 4-7), two PCIe switches per clique."""
    return node(
        name,
        gpus(
            name,
            topology_group=lambda i: f"{name}-nvl{i // 4}",
            pcie_switch=lambda i: f"{name}-sw{i // 2}",
            numa_node=lambda i: i // 4,
        ),
    )


def pcie_node(name: str = "pcie") -> NodeState:
    """8 PCIe GPUs, pairs behind a switch, four per NUMA node, no NVLink."""
    return node(
        name,
        gpus(
            name,
            model="L40S",
            memory=46 * GiB,
            pcie_switch=lambda i: f"{name}-sw{i // 2}",
            numa_node=lambda i: i // 4,
        ),
    )


def test_four_card_request_lands_on_one_nvlink_clique():
    snap = Snapshot([nvlink_node()])
    occupy(snap, "dgx", 1)  # clique 0 has three free cards left
    decision = Engine("topology", seed=1).place(snap, Request("train", groups=(whole(4),)))
    assert devices_of(decision) == [f"dgx/gpu{i}" for i in (4, 5, 6, 7)]
    assert decision.placement.topology == Topology.CLIQUE


def test_two_cards_take_the_tightest_clique_and_keep_the_intact_one():
    snap = Snapshot([nvlink_node()])
    occupy(snap, "dgx", 1)
    decision = Engine("topology", seed=1).place(snap, Request("pair", groups=(whole(2),)))
    chosen = devices_of(decision)
    assert all(int(d[-1]) < 4 for d in chosen)  # inside clique 0, clique 1 stays whole for a 4-card job
    assert decision.placement.topology == Topology.CLIQUE


def test_pcie_node_prefers_same_switch_pairs_then_numa_then_cross_numa():
    snap = Snapshot([pcie_node()])
    occupy(snap, "pcie", 0, 2)  # switch 0 and 1 are half used; free: 1, 3, 4, 5, 6, 7
    engine = Engine("topology", seed=1)
    first = engine.place(snap, Request("a", groups=(whole(2),)))
    assert first.placement.topology == Topology.SWITCH
    assert {d[-1] for d in devices_of(first)} in ({"4", "5"}, {"6", "7"})
    second = engine.place(snap, Request("b", groups=(whole(2),)))
    assert second.placement.topology == Topology.SWITCH  # the other intact switch
    third = engine.place(snap, Request("c", groups=(whole(2),)))
    assert devices_of(third) == ["pcie/gpu1", "pcie/gpu3"]
    assert third.placement.topology == Topology.NUMA


def test_cross_numa_when_nothing_tighter_fits():
    snap = Snapshot([pcie_node()])
    occupy(snap, "pcie", 0, 2, 4)
    decision = Engine("topology", seed=1).place(snap, Request("wide", groups=(whole(4),)))
    assert decision.placement.topology == Topology.CROSS_NUMA


def test_topology_policy_prefers_the_node_with_the_tighter_group():
    snap = Snapshot([pcie_node("a"), nvlink_node("b")])
    decision = Engine("topology", seed=1).place(snap, Request("x", groups=(whole(4),)))
    assert decision.placement.nodes == ("b",)


# ---- slices, overcommit, whole cards -------------------------------------------------------------


def test_overcommit_applies_to_shared_slices_only_and_never_to_memory():
    snap = Snapshot(
        [node("n", gpus("n", 1, memory=40 * GiB), pool="infer")],
        pools=[PoolInfo("infer", overcommit_pct=150)],
    )
    engine = Engine("bestfit", seed=1)
    assert engine.place(snap, Request("s1", groups=(shared_slice(600, 10 * GiB),))).placed
    assert engine.place(snap, Request("s2", groups=(shared_slice(600, 10 * GiB),))).placed  # 1200 ≤ 1500
    assert not engine.place(snap, Request("s3", groups=(shared_slice(400, 1 * GiB),))).placed  # 1600 > 1500
    assert not engine.place(
        snap, Request("s4", groups=(shared_slice(100, 25 * GiB),))
    ).placed  # memory is never overcommitted
    # a hard slice is real capacity: the shared tenants may only be sold 1.5 × what is left after it
    assert not engine.place(
        snap, Request("h1", groups=(hard_slice(300, 1 * GiB),))
    ).placed  # 1200 > 1.5 × 700
    assert engine.place(snap, Request("h2", groups=(hard_slice(100, 1 * GiB),))).placed  # 1200 ≤ 1.5 × 900
    assert snap.check_invariants() == []


def test_hard_slices_stay_within_the_real_card_even_in_an_overcommitted_pool():
    snap = Snapshot([node("n", gpus("n", 1), pool="infer")], pools=[PoolInfo("infer", overcommit_pct=150)])
    engine = Engine("bestfit", seed=1)
    assert engine.place(snap, Request("h1", groups=(hard_slice(600, 8 * GiB),))).placed
    assert not engine.place(snap, Request("h2", groups=(hard_slice(500, 8 * GiB),))).placed
    assert engine.place(
        snap, Request("s1", groups=(shared_slice(600, 8 * GiB),))
    ).placed  # 600·1.5 + 600 ≤ 1500
    assert not engine.place(snap, Request("s2", groups=(shared_slice(100, 8 * GiB),))).placed


def test_without_overcommit_shared_slices_cannot_exceed_the_card():
    snap = Snapshot([node("n", gpus("n", 1))])
    engine = Engine("bestfit", seed=1)
    assert engine.place(snap, Request("s1", groups=(shared_slice(600),))).placed
    assert not engine.place(snap, Request("s2", groups=(shared_slice(600),))).placed


def test_a_whole_card_excludes_every_other_allocation():
    snap = Snapshot([node("n", gpus("n", 2))])
    engine = Engine("bestfit", seed=1)
    slice_dec = engine.place(snap, Request("slice", groups=(shared_slice(100, GiB),)))
    assert devices_of(slice_dec) == ["n/gpu0"]
    assert engine.place(snap, Request("two", groups=(whole(2),))).rejections == {
        "n": "insufficient free cards"
    }
    card = engine.place(snap, Request("one", groups=(whole(1),)))
    assert devices_of(card) == ["n/gpu1"]
    another = engine.place(snap, Request("slice2", groups=(shared_slice(100, GiB),)))
    assert devices_of(another) == ["n/gpu0"]
    with pytest.raises(CapacityError):
        snap.apply(
            Placement(
                "sneak",
                (NodePart("n", 0, 0, (DeviceAssignment("n/gpu1", 1, 0, False, GiB, 10, Isolation.SHARED),)),),
            )
        )
    assert snap.check_invariants() == []


def test_co_location_pairs_compute_heavy_with_memory_heavy_tenants():
    snap = Snapshot([node("n", gpus("n", 2))])
    engine = Engine("bestfit", seed=1)
    compute_heavy = engine.place(snap, Request("compute", groups=(hard_slice(500, 8 * GiB),)))
    assert devices_of(compute_heavy) == ["n/gpu0"]
    snap.release("compute")
    # put a compute-heavy tenant on card 0 and a memory-heavy one on card 1, explicitly
    for rid, dev, compute, mem in (("c", 0, 500, 8 * GiB), ("m", 1, 100, 48 * GiB)):
        snap.apply(
            Placement(
                rid,
                (
                    NodePart(
                        "n",
                        0,
                        0,
                        (DeviceAssignment(f"n/gpu{dev}", dev, 0, False, mem, compute, Isolation.HARD),),
                    ),
                ),
            )
        )
    # compute best fit alone would pick card 0 (less compute left); pairing picks the memory-heavy card
    new_compute_heavy = engine.place(snap, Request("c2", groups=(hard_slice(400, 4 * GiB),)))
    assert devices_of(new_compute_heavy) == ["n/gpu1"]
    new_memory_heavy = engine.place(snap, Request("m2", groups=(hard_slice(50, 24 * GiB),)))
    assert devices_of(new_memory_heavy) == ["n/gpu0"]


# ---- gangs and fallbacks --------------------------------------------------------------------------


def test_multi_card_requests_are_all_or_nothing():
    snap = Snapshot([node("a", gpus("a", 4)), node("b", gpus("b", 4))])
    occupy(snap, "a", 0)
    occupy(snap, "b", 0)
    before = [(d.id, d.whole_by) for n in snap.nodes for d in n.devices]
    decision = Engine("bestfit", seed=1).place(snap, Request("four", groups=(whole(4),)))
    assert not decision.placed
    assert decision.explanation == "0/2 nodes are available: 2 insufficient free cards."
    assert [(d.id, d.whole_by) for n in snap.nodes for d in n.devices] == before


def test_multi_node_gang_places_every_replica_or_none():
    snap = Snapshot([node(f"n{i}", gpus(f"n{i}", 4)) for i in range(3)])
    occupy(snap, "n2", 0)
    engine = Engine("bestfit", seed=1)
    too_big = engine.place(snap, Request("gang3", groups=(whole(4),), replicas=3))
    assert not too_big.placed
    assert "only 2 fit" in too_big.explanation
    assert not any(rid.startswith("gang3") for rid in snap.placements)
    assert snap.check_invariants() == []
    fits = engine.place(snap, Request("gang2", groups=(whole(4),), replicas=2))
    assert fits.placed
    assert sorted(fits.placement.nodes) == ["n0", "n1"]
    assert fits.cross_node
    assert [p.replica for p in fits.placement.parts] == [0, 1]


def test_gang_on_one_switch():
    snap = Snapshot(
        [node(f"n{i}", gpus(f"n{i}", 4), switch="leaf-a" if i < 2 else "leaf-b") for i in range(4)]
    )
    occupy(snap, "n0", 0)
    decision = Engine("bestfit", seed=1).place(
        snap, Request("g", groups=(whole(4),), replicas=2, topology=TopologyPolicy("sameSwitch"))
    )
    assert sorted(decision.placement.nodes) == ["n2", "n3"]


MIXED = (whole(1, kind="gpu"), whole(2, kind="npu"))
NPU_TOLERATION = (Toleration("accelerator", "Exists"),)


def mixed_request(rid: str = "mixed") -> Request:
    return Request(
        rid,
        cpu_milli=12_000,
        groups=MIXED,
        tolerations=NPU_TOLERATION,
        topology=TopologyPolicy("sameNode", preferred="sameSwitch"),
    )


def npu_devices(name: str, n: int = 8) -> list[DeviceState]:
    return gpus(
        name, n, kind="npu", vendor="huawei", model="Ascend-910B", memory=64 * GiB, features=("rdma", "hccs")
    )


def test_mixed_gpu_npu_request_prefers_one_node():
    snap = Snapshot(
        [
            node("gpu", gpus("gpu", 4), switch="leaf-1"),
            node("npu", npu_devices("npu"), switch="leaf-1", taints=[Taint("accelerator", "huawei-npu")]),
            node("both", gpus("both", 2) + npu_devices("both", 4), switch="leaf-2"),
        ]
    )
    decision = Engine("slotfrag", seed=1).place(snap, mixed_request())
    assert decision.placement.nodes == ("both",)
    assert not decision.cross_node
    kinds = sorted(d.device_id.split("/")[1][:3] for d in decision.placement.parts[0].devices)
    assert kinds == ["gpu", "npu", "npu"]


def test_mixed_request_falls_back_to_same_switch_and_is_marked_cross_node():
    snap = Snapshot(
        [
            node("gpu-1", gpus("gpu-1", 4), switch="leaf-1"),
            node("npu-1", npu_devices("npu-1"), switch="leaf-1", taints=[Taint("accelerator", "huawei-npu")]),
            node("gpu-2", gpus("gpu-2", 4), switch="leaf-2"),
        ]
    )
    decision = Engine("slotfrag", seed=1).place(snap, mixed_request())
    assert decision.placed
    assert decision.cross_node
    assert sorted(decision.placement.nodes) == ["gpu-1", "npu-1"]
    assert any(s.tier == "fallback" and "cross-node" in s.message for s in decision.steps)
    assert sum(p.cpu_milli for p in decision.placement.parts) == 12_000
    assert snap.check_invariants() == []
    assert snap.placements["mixed"].cross_node


def test_mixed_request_fails_when_no_switch_holds_both_kinds():
    snap = Snapshot(
        [
            node("gpu-1", gpus("gpu-1", 4), switch="leaf-1"),
            node("npu-2", npu_devices("npu-2"), switch="leaf-2", taints=[Taint("accelerator", "huawei-npu")]),
        ]
    )
    decision = Engine("slotfrag", seed=1).place(snap, mixed_request())
    assert not decision.placed
    assert decision.explanation.startswith("0/2 nodes are available: 1 no gpu, 1 no npu.")
    assert "no switch domain can host every part" in decision.explanation
    assert snap.placements == {}


def test_mixed_request_without_fallback_stays_on_one_node():
    snap = Snapshot(
        [
            node("gpu-1", gpus("gpu-1", 4), switch="leaf-1"),
            node("npu-1", npu_devices("npu-1"), switch="leaf-1"),
        ]
    )
    req = Request("strict", groups=MIXED, topology=TopologyPolicy("sameNode"))
    assert not Engine("slotfrag", seed=1).place(snap, req).placed


# ---- decisions, traces, the cycle -----------------------------------------------------------------


def test_decision_trace_has_an_id_and_ordered_steps():
    snap = Snapshot([node("a"), node("b", status=NodeStatus.MAINTENANCE)])
    engine = Engine("bestfit", seed=1)
    d1 = engine.place(snap, Request("x", groups=(whole(1),)))
    d2 = engine.place(snap, Request("y", groups=(whole(1),)))
    assert d1.trace_id != d2.trace_id and len(d1.trace_id) == 32
    assert [s.tier for s in d1.steps] == ["filter", "score", "assign", "result"]
    assert d1.steps[0].data["rejected"] == {"node in maintenance": 1}
    assert d1.candidates and d1.candidates[0].node == "a"
    assert d1.rejections == {"b": "node in maintenance"}
    assert d1.to_dict()["placement"]["parts"][0]["node"] == "a"


def test_commit_false_previews_without_changing_the_snapshot():
    snap = Snapshot([node("a", gpus("a", 1))])
    engine = Engine("bestfit", seed=1)
    preview = engine.place(snap, Request("x", groups=(whole(1),)), commit=False)
    assert preview.placed and snap.placements == {}
    engine.apply(snap, preview.placement)
    assert "x" in snap.placements


def test_release_returns_capacity_and_the_index_notices():
    snap = Snapshot([node("a", gpus("a", 2))])
    engine = Engine("slotfrag", seed=1)
    assert engine.place(snap, Request("x", groups=(whole(2),))).placed
    assert not engine.place(snap, Request("y", groups=(whole(1),))).placed
    engine.release(snap, "x")
    assert engine.place(snap, Request("z", groups=(whole(1),))).placed
    with pytest.raises(CapacityError):
        snap.release("x")


def test_static_changes_are_seen_by_the_next_decision():
    snap = Snapshot([node("a", gpus("a", 2)), node("b", gpus("b", 2))])
    engine = Engine("bestfit", seed=1)
    assert engine.place(snap, Request("x", groups=(whole(1),))).placed
    snap.set_node_status("a", NodeStatus.QUARANTINED, "xid 79")
    snap.set_node_status("b", NodeStatus.DRAINING)
    decision = engine.place(snap, Request("y", groups=(whole(1),)))
    assert decision.rejections == {"a": "node quarantined", "b": "node draining"}


def test_schedule_runs_the_queue_by_priority():
    snap = Snapshot([node("a", gpus("a", 1))])
    queue = [Request("low", groups=(whole(1),), priority=0), Request("high", groups=(whole(1),), priority=10)]
    decisions = Engine("bestfit", seed=1).schedule(snap, queue)
    assert [(d.request_id, d.placed) for d in decisions] == [("high", True), ("low", False)]


def test_snapshot_round_trips_through_records():
    snap = Snapshot.from_records(
        nodes=[
            {
                "name": "a",
                "cpu_milli": 32_000,
                "memory_mib": 256 * GiB,
                "pool": "p",
                "taints": [{"key": "accelerator", "value": "huawei-npu"}],
                "devices": [
                    {
                        "id": "a/npu0",
                        "kind": "npu",
                        "vendor": "huawei",
                        "model": "Ascend-910B",
                        "memory_mib": 64 * GiB,
                    }
                ],
            }
        ],
        pools=[{"name": "p", "overcommit_pct": 120}],
    )
    req = Request("x", groups=(hard_slice(250, 16 * GiB, kind="npu"),), tolerations=NPU_TOLERATION)
    decision = Engine("bestfit", seed=1).place(snap, req, commit=False)
    copy = Snapshot.from_records(
        nodes=[
            {
                "name": "a",
                "cpu_milli": 32_000,
                "memory_mib": 256 * GiB,
                "devices": [{"id": "a/npu0", "kind": "npu", "memory_mib": 64 * GiB}],
            }
        ],
        allocations=[decision.placement.to_dict()],
    )
    assert copy.node("a").devices[0].mem_used == 16 * GiB
    assert snap.factor_pct(snap.node("a")) == 120


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_places_and_respects_the_invariants(policy):
    snap = Snapshot([nvlink_node("a"), pcie_node("b"), node("c", gpus("c", 2, memory=24 * GiB), cpu=16_000)])
    engine = Engine(policy, seed=3)
    reqs = [
        Request("w1", cpu_milli=4_000, groups=(whole(1),)),
        Request("w4", cpu_milli=16_000, groups=(whole(4),)),
        Request("s1", cpu_milli=2_000, groups=(hard_slice(300, 10 * GiB),)),
        Request("s2", cpu_milli=2_000, groups=(shared_slice(200, 4 * GiB),)),
        Request("cpu", cpu_milli=8_000),
        Request("w8", groups=(whole(8),)),
    ]
    results = engine.schedule(snap, reqs)
    assert [d.placed for d in results][:5] == [True] * 5
    assert snap.check_invariants() == []


def test_whole_card_choice_without_topology_uses_the_lowest_free_index():
    n = node("plain", gpus("plain", 4))
    got = assign.pick_whole(n, range(4), 2)
    assert got == ((0, 1), Topology.UNKNOWN)


def test_a_copy_is_independent():
    snap = Snapshot([node("a", gpus("a", 2))])
    engine = Engine("bestfit", seed=1)
    engine.place(snap, Request("x", groups=(whole(1),)))
    twin = snap.copy()
    assert engine.place(twin, Request("y", groups=(whole(1),))).placed
    assert "y" not in snap.placements and snap.node("a").devices[1].empty
    assert twin.check_invariants() == [] and snap.check_invariants() == []
    twin.release("x")
    assert not snap.node("a").devices[0].empty


# ---- fragmentation policies ------------------------------------------------------------------------


def test_vendor_neutral_requests_leave_scarce_hardware_to_the_requests_that_need_it():
    snap = Snapshot(
        [node("dcu", gpus("dcu", kind="dcu", vendor="hygon", model="K100"))]
        + [node(f"gpu{i}", gpus(f"gpu{i}")) for i in range(3)]
    )
    history = [Request(f"h{i}", cpu_milli=4_000, groups=(whole(1, vendors={"hygon"}),)) for i in range(50)]
    history += [Request(f"n{i}", cpu_milli=4_000, groups=(whole(1),)) for i in range(50)]
    engine = Engine("slotfrag", seed=1, workload=history)
    for i in range(12):
        decision = engine.place(snap, Request(f"neutral{i}", cpu_milli=4_000, groups=(whole(1),)))
        assert decision.placement.nodes[0].startswith("gpu")
    hygon = engine.place(snap, Request("hygon", cpu_milli=4_000, groups=(whole(1, vendors={"hygon"}),)))
    assert hygon.placement.nodes == ("dcu",)


def test_shapes_only_large_nodes_can_hold_weigh_more():
    from apps.scheduling.engine.frag import FragModel, Shape

    snap = Snapshot([node("big", cpu=128_000)] + [node(f"small{i}", cpu=64_000) for i in range(3)])
    large = Shape(cpu_milli=120_000, count=8)
    small = Shape(cpu_milli=8_000, count=1)
    model = FragModel([(large, 0.1), (small, 0.9)], "slots")
    assert model.set_supply(snap)
    weights = {m[0]: m[2] for g in model.groups for m in g[5]}
    assert weights[120_000] / 0.1 == pytest.approx(4 * weights[8_000] / 0.9)  # 32 cards, 8 can hold it
    assert not model.set_supply(snap)  # unchanged fleet: same weights


def test_slot_fragmentation_counts_cards_stranded_behind_cpu():
    from apps.scheduling.engine.frag import FragModel, Shape

    model = FragModel([(Shape(cpu_milli=4_000, count=1), 1.0)], "slots", strand_cpu=(1.0, 8.0))
    idle = model.value(model.key((("gpu", "", ""),), 64_000, 0, [(0, 1000, 0, True)] * 8))
    starved = model.value(model.key((("gpu", "", ""),), 8_000, 0, [(0, 1000, 0, True)] * 8))
    # 8 cards, CPU for 2 pods of the shape: 6 cards unusable, and 7 stranded at 8 cores per card
    assert idle == 0
    assert starved == pytest.approx(6000 + 7000)
