"""Engine throughput on a synthetic mixed-vendor fleet: 1,000 nodes / 8,000 devices, 5,000 requests.

Fleet (seeded): NVIDIA A100 SXM nodes (one NVSwitch clique of 8, 4 PCIe switches, 2 NUMA nodes),
NVIDIA L40S PCIe nodes (no NVLink: pairs behind a PCIe switch), Huawei Ascend 910B nodes (HCCS
clique of 8, tainted ``accelerator=huawei-npu``), Hygon K100 DCU nodes (xGMI cliques of 4, tainted
``accelerator=hygon-dcu``); two pools (training, inference with 150 % overcommit for shared slices).
Queue: whole cards ×1/2/4/8, hard memory+compute slices, shared slices; vendor-specific and
vendor-neutral requests.

For each policy the whole queue is placed with a fresh snapshot (explanations and top candidates
on, as in production) and every ``place`` call is timed: decisions per second and p50 / p99 latency,
and the same rate without the first decision ("warm"), whose time ("1st ms") includes building the
fleet index of the fresh snapshot — O(nodes), paid once per snapshot; the scheduling cycle keeps its
snapshot, and so its indexes, between cycles.
A naive baseline measured in the same run — first fit scanning every node with the same filters and
no caches — gives the ratio. Figures only: nothing is asserted.

    python benchmarks/engine_throughput.py [--nodes 1000,5000,10000] [--requests 5000] [--policies a,b]

``--nodes`` takes one size or several (default: 1,000, 5,000 and 10,000 in one run, then the ratio of
the largest to the smallest fleet's rate per scheduler).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.scheduling.engine import (  # noqa: E402  # noqa: E402
    DeviceGroup,
    DeviceState,
    Engine,
    Isolation,
    NodeState,
    Placement,
    PoolInfo,
    Request,
    Snapshot,
    Taint,
    Toleration,
    assign,
    filters,
)
from apps.scheduling.engine.policies import policy_names  # noqa: E402

NPU_TAINT = Taint("accelerator", "huawei-npu")
DCU_TAINT = Taint("accelerator", "hygon-dcu")
TOLERATE_ALL = (Toleration("accelerator", "Exists"),)

# kind, vendor, model, memory MiB, cliques per node (0 = none), features, taint, share of nodes
NODE_TYPES = [
    ("gpu", "nvidia", "A100-SXM4-80GB", 81920, 1, ("nvlink", "mig", "rdma"), None, 0.40),
    ("gpu", "nvidia", "L40S", 46068, 0, ("rdma",), None, 0.25),
    ("npu", "huawei", "Ascend-910B", 65536, 1, ("hccs", "vnpu", "rdma"), NPU_TAINT, 0.25),
    ("dcu", "hygon", "K100", 65536, 2, ("xgmi",), DCU_TAINT, 0.10),
]


def build_fleet(n_nodes: int, rng: random.Random) -> Snapshot:
    snap = Snapshot(pools=[PoolInfo("training"), PoolInfo("inference", overcommit_pct=150)])
    counts = [round(n_nodes * t[-1]) for t in NODE_TYPES]
    counts[0] += n_nodes - sum(counts)
    i = 0
    for (kind, vendor, model, mem, cliques, feats, taint, _share), count in zip(
        NODE_TYPES, counts, strict=True
    ):
        for _ in range(count):
            name = f"{vendor}-{i:04d}"
            devices = []
            for k in range(8):
                clique = f"{name}-c{k // (8 // cliques)}" if cliques else ""
                devices.append(
                    DeviceState(
                        f"{name}/{kind}{k}",
                        k,
                        kind=kind,
                        vendor=vendor,
                        model=model,
                        memory_mib=mem,
                        features=feats,
                        topology_group=clique,
                        pcie_switch=f"{name}-sw{k // 2}",
                        numa_node=k // 4,
                    )
                )
            snap.add_node(
                NodeState(
                    name,
                    cpu_milli=128_000,
                    memory_mib=1_048_576,
                    devices=devices,
                    pool="inference" if rng.random() < 0.2 else "training",
                    labels={"accelerator": vendor, "model": model},
                    taints=[taint] if taint else [],
                    switch=f"leaf-{i // 32:02d}",
                )
            )
            i += 1
    return snap


def build_queue(n_requests: int, rng: random.Random) -> list[Request]:
    vendors = [
        ("nvidia", "gpu", ()),
        ("huawei", "npu", TOLERATE_ALL),
        ("hygon", "dcu", TOLERATE_ALL),
        (None, None, TOLERATE_ALL),
    ]
    vendor_w = [0.45, 0.2, 0.1, 0.25]
    out = []
    for n in range(n_requests):
        vendor, kind, tol = rng.choices(vendors, vendor_w)[0]
        vend = frozenset([vendor]) if vendor else frozenset()
        roll = rng.random()
        if roll < 0.55:
            count = rng.choices([1, 2, 4, 8], [0.55, 0.25, 0.13, 0.07])[0]
            group = DeviceGroup(count=count, whole=True, kind=kind, vendors=vend)
            cpu, mem = 8_000 * count, 65_536 * count
        elif roll < 0.8:
            size = rng.choice([(10_240, 250), (20_480, 250), (20_480, 500), (40_960, 500)])
            group = DeviceGroup(
                count=1,
                whole=False,
                memory_mib=size[0],
                compute=size[1],
                isolation=Isolation.HARD,
                kind=kind,
                vendors=vend,
            )
            cpu, mem = 4_000, 32_768
        else:
            group = DeviceGroup(
                count=1,
                whole=False,
                memory_mib=rng.choice([4_096, 8_192]),
                compute=rng.choice([100, 200, 300]),
                isolation=Isolation.SHARED,
                kind=kind,
                vendors=vend,
            )
            cpu, mem = 2_000, 16_384
        out.append(Request(f"req-{n:05d}", cpu_milli=cpu, memory_mib=mem, groups=(group,), tolerations=tol))
    return out


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def naive_first_fit(snapshot: Snapshot, req: Request) -> bool:
    """The baseline: scan every node, filter without caches, take the first that fits."""
    for node in snapshot.nodes:
        reason, elig = filters.static_reason(snapshot, node, req)
        if reason is not None:
            continue
        if filters.capacity_reason(snapshot, node, req, elig) is not None:
            continue
        got = assign.choose_devices(node, req, elig, snapshot.factor_pct(node))
        if got is None:
            continue
        choice, tier = got
        snapshot.apply(Placement(req.id, (assign.build_part(node, req, choice, tier),)))
        return True
    return False


def measure(label: str, fleet_seed: int, n_nodes: int, queue: list[Request], place) -> dict:
    snap = build_fleet(n_nodes, random.Random(fleet_seed))
    times = []
    placed = 0
    t_all = time.perf_counter()
    for req in queue:
        t0 = time.perf_counter()
        ok = place(snap, req)
        times.append(time.perf_counter() - t0)
        placed += bool(ok)
    total = time.perf_counter() - t_all
    problems = snap.check_invariants()
    used, cap = snap.gpu_totals()
    # The first decision on a fresh snapshot also builds the fleet index (``engine/index.py``
    # NodeClasses: one static key per node, O(nodes)); the scheduling cycle keeps its snapshot between
    # cycles (apps.scheduling.snapshot), so that build is paid once per snapshot, not per decision.
    first = times[0]
    warm = (len(queue) - 1) / (total - first) if len(queue) > 1 and total > first else 0.0
    times.sort()
    return {
        "label": label,
        "decisions_per_s": len(queue) / total,
        "first_ms": first * 1e3,
        "warm_per_s": warm,
        "p50_ms": percentile(times, 0.5) * 1e3,
        "p99_ms": percentile(times, 0.99) * 1e3,
        "placed": placed,
        "allocated_pct": 100.0 * used / cap if cap else 0.0,
        "invariant_violations": len(problems),
    }


def run_size(n_nodes: int, queue: list[Request], policies: list[str], seed: int) -> list[dict]:
    fleet = build_fleet(n_nodes, random.Random(seed))
    n_dev = sum(len(n.devices) for n in fleet.nodes)
    print(f"fleet: {len(fleet.nodes)} nodes, {n_dev} devices; queue: {len(queue)} requests", flush=True)
    rows = [measure("baseline: naive first fit", seed, n_nodes, queue, naive_first_fit)]
    for name in policies:
        engine = Engine(name, seed=seed, workload=queue)
        rows.append(
            measure(f"engine: {name}", seed, n_nodes, queue, lambda s, r, e=engine: e.place(s, r).placed)
        )
    base = rows[0]
    print(
        f"{'scheduler':<28} {'decisions/s':>12} {'warm/s':>8} {'1st ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'placed':>7} "
        f"{'alloc %':>8} {'× baseline':>11} {'violations':>10}"
    )
    for row in rows:
        row["nodes"] = n_nodes
        ratio = row["decisions_per_s"] / base["decisions_per_s"]
        print(
            f"{row['label']:<28} {row['decisions_per_s']:>12.0f} {row['warm_per_s']:>8.0f} {row['first_ms']:>8.1f} "
            f"{row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} "
            f"{row['placed']:>7} {row['allocated_pct']:>8.1f} {ratio:>11.1f} {row['invariant_violations']:>10}",
            flush=True,
        )
    engine_rates = [r["decisions_per_s"] for r in rows[1:]]
    if engine_rates:
        print(
            f"engine decisions/s: min {min(engine_rates):.0f}, median {statistics.median(engine_rates):.0f}"
        )
    print()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes",
        default="1000,5000,10000",
        help="fleet sizes, comma-separated (default 1000,5000,10000: all in one run)",
    )
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--policies", default=",".join(policy_names()))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    sizes = [int(x) for x in str(args.nodes).split(",") if x.strip()]
    policies = [p for p in args.policies.split(",") if p]
    queue = build_queue(args.requests, random.Random(args.seed))
    print("one core, pure Python; every place() call timed (explanations and top candidates on)")
    print()
    by_size = {n: run_size(n, queue, policies, args.seed) for n in sizes}
    violations = sum(r["invariant_violations"] for rows in by_size.values() for r in rows)
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        print(
            f"scaling: decisions/s at {last:,} nodes ÷ at {first:,} nodes (same run); all decisions, then "
            "warm (after the first decision, which builds the fleet index once per snapshot)"
        )
        for i, row in enumerate(by_size[first]):
            other = by_size[last][i]
            print(
                f"{row['label']:<28} {row['decisions_per_s']:>8.0f} → {other['decisions_per_s']:>8.0f}/s"
                f"  ratio {other['decisions_per_s'] / row['decisions_per_s']:.2f}"
                f"   warm {row['warm_per_s']:>8.0f} → {other['warm_per_s']:>8.0f}/s"
                f"  ratio {other['warm_per_s'] / row['warm_per_s'] if row['warm_per_s'] else 0:.2f}"
                f"   p99 {other['p99_ms']:.2f} ms"
            )
    print(f"over-allocated cards / invariant violations after every run: {violations}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
