"""Trace-driven simulator: the Alibaba GPU trace benchmark, run through the same engine.

The method (``shared/benchmarks/alibaba-gpu-trace-2023/README.md``):

1. every node of the node list, every card 1000 milli, all cards of a node of its ``model``;
2. per seed (42 … 51): shuffle the pod list with the seed, then append pods drawn uniformly with
   replacement until the total GPU request reaches 1.3 × cluster GPU capacity;
3. place pods one at a time (CPU and memory must fit, the model must be allowed, ``num_gpu`` distinct
   cards each with ≥ ``gpu_milli`` free; a sharing pod uses one card); no retries, departures or
   preemption; a pod that fits nowhere is counted as failed and skipped;
4. after each pod record *arrived* and *allocated* GPU (% of capacity);
5. report unallocated GPU % = 100 − allocated % at arrived = 100 % (mean ± sd over seeds) and the
   curve from 75 % to 130 % arrived. A curve point is the mean allocation over the pods whose arrived %
   rounds to that integer (as the paper's analysis does).

The method does not say how exact score ties are broken. By default they go to the first node in the
node list (``--tie-break order``): with it best fit, GPU packing and FGD land much closer to their
published figures than with random tie-breaking (``--tie-break random``), which leaves best fit where
it is but makes the policies whose integer scores tie a lot (packing, FGD) far worse.

MIG (``--mig A100-80GB``, off by default, so the published comparison is untouched): every card becomes
a MIG card with that geometry (``apps/catalog/data/mig-geometry.yaml``) and a GPU-sharing pod asks for
the smallest GPU-instance profile whose compute slices cover its ``gpu_milli`` (no media extensions);
the engine then places it only on a free placement (``engine/mig.py``), so the run shows what MIG's
quantization and placement rules cost on this workload. A pod larger than the largest profile asks for
whole cards as before.

Optional, as in the paper: fragmentation at arrived = 100 % — idle GPU that the common pod shapes
(95 % of pods, by frequency, CPU-only pods included) cannot use, and its rate (÷ idle GPU).

CSV formats: nodes ``sn,cpu_milli,memory_mib,gpu,model``; pods either the full trace format
(``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,…``) or the 5-column variant
``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` (no model constraint, no times); either plain or gzip
(a name ending ``.gz``: the published variants kept in ``benchmarks/data/alibaba-gpu-trace-2023/``).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .engine import Engine
from .fleet import Snapshot
from .frag import FragModel, shape_of, typical_shapes
from .nodes import DeviceState, Isolation, NodeState
from .policies import BEST, get_policy, policy_names
from .request import DeviceGroup, Request
from .share import WHOLE

DEFAULT_SEEDS = tuple(range(42, 52))
CURVE_POINTS = tuple(range(75, 131))
INFLATION = 1.3
BOUND_SECONDS = 30.0  # the node-pattern LP's time per seed (valid when stopped; 0 = skip it)
TRACE_DIR = Path(__file__).resolve().parents[4] / "shared" / "benchmarks" / "alibaba-gpu-trace-2023"
DEFAULT_NODES = TRACE_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACE_DIR / "openb_pod_list_default.csv"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    models: frozenset[str] = frozenset()

    @property
    def gpu(self) -> int:
        """Requested GPU in milli-cards."""
        return self.num_gpu * self.gpu_milli


# ---- loading ----------------------------------------------------------------------------------------


def _int(row: dict, *keys: str, default: int = 0) -> int:
    for key in keys:
        value = row.get(key)
        if value is not None and value != "":
            return int(float(value))
    return default


def _rows(path: str | Path) -> list[dict]:
    """The CSV's rows; a name ending ``.gz`` is read through gzip (the variants kept in the repo)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="") as fh:
        return list(csv.DictReader(fh))


def load_nodes(path: str | Path) -> list[NodeSpec]:
    rows = _rows(path)
    nodes = []
    for i, row in enumerate(rows):
        name = row.get("sn") or row.get("name") or f"node-{i:04d}"
        model = (row.get("model") or "").strip()
        if model.lower() == "nan":
            model = ""
        nodes.append(
            NodeSpec(
                name, _int(row, "cpu_milli"), _int(row, "memory_mib"), _int(row, "gpu", "num_gpu"), model
            )
        )
    if not nodes:
        raise ValueError(f"{path}: no nodes")
    return nodes


def load_pods(path: str | Path) -> list[PodSpec]:
    """Either CSV variant (plain or ``.gz``); a pod asking for whole cards has ``gpu_milli`` = 1000."""
    rows = _rows(path)
    pods = []
    for i, row in enumerate(rows):
        num = _int(row, "num_gpu")
        milli = _int(row, "gpu_milli", default=WHOLE if num else 0)
        if num and milli <= 0:
            milli = WHOLE
        if not num:
            milli = 0
        spec = (row.get("gpu_spec") or "").strip()
        models = frozenset(m for m in spec.split("|") if m and m.lower() != "nan")
        pods.append(
            PodSpec(
                row.get("name") or f"pod-{i:05d}",
                _int(row, "cpu_milli"),
                _int(row, "memory_mib"),
                num,
                min(milli, WHOLE),
                models,
            )
        )
    if not pods:
        raise ValueError(f"{path}: no pods")
    return pods


def mig_geometry(key: str | None):
    """The geometry named ``key`` (e.g. ``A100-80GB``) from the catalog's MIG data, or None."""
    if not key:
        return None
    from apps.catalog.mig import geometries

    found = geometries().get(key)
    if found is None:
        raise ValueError(f"unknown MIG geometry {key!r}; known: {', '.join(sorted(geometries()))}")
    return found


def mig_profile_for(geometry, gpu_milli: int) -> str | None:
    """The smallest profile (compute slices, then memory slices) whose compute covers ``gpu_milli``."""
    best = None
    for p in geometry.profiles.values():
        if "+" in p.name or p.compute * WHOLE < gpu_milli * geometry.compute_slices:
            continue
        if best is None or (p.compute, p.size) < (best.compute, best.size):
            best = p
    return None if best is None else best.name


def build_snapshot(nodes: Sequence[NodeSpec], mig=None) -> Snapshot:
    snap = Snapshot()
    for spec in nodes:
        devices = [
            DeviceState(f"{spec.name}/gpu{i}", i, kind="gpu", model=spec.model, mig=mig)
            for i in range(spec.gpus)
        ]
        snap.add_node(
            NodeState(spec.name, cpu_milli=spec.cpu_milli, memory_mib=spec.memory_mib, devices=devices)
        )
    return snap


def to_request(pod: PodSpec, rid: str | None = None, mig=None) -> Request:
    groups: tuple[DeviceGroup, ...] = ()
    profile = mig_profile_for(mig, pod.gpu_milli) if mig is not None and pod.num_gpu else None
    if pod.num_gpu:
        if profile is not None and pod.gpu_milli < WHOLE:
            groups = (
                DeviceGroup(
                    count=pod.num_gpu,
                    whole=False,
                    compute=pod.gpu_milli,
                    isolation=Isolation.HARD,
                    kind="gpu",
                    models=pod.models,
                    profile=profile,
                ),
            )
        elif pod.gpu_milli >= WHOLE:
            groups = (DeviceGroup(count=pod.num_gpu, whole=True, kind="gpu", models=pod.models),)
        else:
            groups = (
                DeviceGroup(
                    count=pod.num_gpu,
                    whole=False,
                    compute=pod.gpu_milli,
                    isolation=Isolation.SHARED,
                    kind="gpu",
                    models=pod.models,
                ),
            )
    return Request(rid or pod.name, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, groups=groups)


def workload(pods: Sequence[PodSpec], seed: int, capacity: int, ratio: float = INFLATION) -> list[PodSpec]:
    """Shuffle with ``seed``, then append uniform draws until the GPU request reaches ``ratio`` × capacity."""
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    total = sum(p.gpu for p in order)
    if any(p.gpu for p in pods):
        while total < ratio * capacity:
            p = rng.choice(pods)
            order.append(p)
            total += p.gpu
    return order


# ---- one run ----------------------------------------------------------------------------------------


def curve_from_records(
    records: Sequence[tuple[float, float]], points: Sequence[int] = CURVE_POINTS
) -> dict[int, float]:
    """Mean allocation over the pods whose arrived % rounds to each point.

    When no pod's arrival rounds to a point, the pods within ±1 are used (as the paper's analysis does);
    on very small traces with no pod there either, the allocation reached when arrival passed the point.
    """
    buckets: dict[int, list[float]] = {}
    for arrived, allocated in records:
        buckets.setdefault(round(arrived), []).append(allocated)
    curve = {}
    for x in points:
        vals = buckets.get(x)
        if not vals:
            vals = [a for k in (x - 1, x, x + 1) for a in buckets.get(k, ())]
        if vals:
            curve[x] = sum(vals) / len(vals)
        elif records:
            reached = [a for arrived, a in records if arrived <= x]
            curve[x] = reached[-1] if reached else records[0][1]
    return curve


def run_once(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    policy: str,
    seed: int,
    ratio: float = INFLATION,
    frag: bool = True,
    tie_break: str = "order",
    mig: str | None = None,
) -> dict:
    """One seed of one policy: the curve, the failed pods and (optionally) fragmentation at 100 %."""
    geometry = mig_geometry(mig)
    snap = build_snapshot(nodes, geometry)
    capacity = sum(n.gpus for n in nodes) * WHOLE
    requests = [to_request(p, mig=geometry) for p in pods]
    engine = Engine(policy, seed=seed, explain=False, top_k=0, workload=requests, tie_break=tie_break)
    order = workload(pods, seed, capacity, ratio)
    arrived = allocated = 0
    failed = failed_at_100 = 0
    records: list[tuple[float, float]] = []
    frag_at_100 = None
    scale = 100.0 / capacity if capacity else 0.0
    t0 = time.perf_counter()
    for n, pod in enumerate(order):
        decision = engine.place(snap, to_request(pod, f"{pod.name}#{n}", geometry))
        arrived += pod.gpu
        if decision.placement is not None:
            allocated += pod.gpu
        else:
            failed += 1
            if arrived <= capacity:
                failed_at_100 += 1
        records.append((arrived * scale, allocated * scale))
        if frag and frag_at_100 is None and arrived >= capacity:
            frag_at_100 = fragmentation(snap, requests, capacity)
    elapsed = time.perf_counter() - t0
    curve = curve_from_records(records)
    return {
        "policy": policy,
        "seed": seed,
        "pods": len(order),
        "failed_pods": failed,
        "failed_pods_at_100": failed_at_100,
        "curve": curve,
        "unallocated_at_100": 100.0 - curve.get(100, records[-1][1] if records else 0.0),
        "fragmentation": frag_at_100,
        "seconds": elapsed,
        **({"mig": mig, "invariant_problems": len(snap.check_invariants())} if mig else {}),
    }


def fragmentation(snap: Snapshot, requests: Sequence[Request], capacity: int) -> dict:
    """The paper's fragmentation (FGD measure over 95 % of pod shapes) as % of capacity, and its rate."""
    typical = typical_shapes((shape_of(r, use_memory=False) for r in requests), 0.95, include_cpu_only=True)
    model = FragModel(typical, mode="fgd")
    frag, idle = model.cluster(snap)
    return {
        "frag_pct": 100.0 * frag / capacity if capacity else 0.0,
        "frag_rate": 100.0 * frag / idle if idle else 0.0,
    }


# ---- many runs --------------------------------------------------------------------------------------


def _job(args: tuple) -> dict:
    return run_once(*args)


def run_benchmark(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    policies: Sequence[str],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    *,
    ratio: float = INFLATION,
    jobs: int = 1,
    progress=None,
    tie_break: str = "order",
    mig: str | None = None,
) -> dict[str, dict]:
    """``{policy: {"unallocated_at_100": {"mean", "sd"}, "curve": {...}, "failed_pods": n, ...}}``."""
    for name in policies:
        get_policy(name)  # fail fast on a typo
    mig_geometry(mig)  # fail fast on an unknown geometry
    tasks = [(nodes, pods, name, seed, ratio, True, tie_break, mig) for name in policies for seed in seeds]
    runs: list[dict] = []
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for res in pool.map(_job, tasks):
                runs.append(res)
                if progress:
                    progress(res)
    else:
        for task in tasks:
            res = _job(task)
            runs.append(res)
            if progress:
                progress(res)
    return summarize(runs, policies)


def _mean_sd(values: Sequence[float]) -> dict[str, float]:
    values = list(values)
    mean = statistics.fmean(values) if values else 0.0
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(mean, 4), "sd": round(sd, 4)}


def summarize(runs: Sequence[dict], policies: Sequence[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in policies:
        mine = sorted((r for r in runs if r["policy"] == name), key=lambda r: r["seed"])
        curve = {}
        for x in CURVE_POINTS:
            vals = [r["curve"][x] for r in mine if x in r["curve"]]
            if vals:
                curve[str(x)] = round(statistics.fmean(vals), 4)
        frags = [r["fragmentation"] for r in mine if r.get("fragmentation")]
        out[name] = {
            "unallocated_at_100": _mean_sd([r["unallocated_at_100"] for r in mine]),
            "curve": curve,
            "failed_pods": round(statistics.fmean(r["failed_pods"] for r in mine), 1) if mine else 0,
            "failed_pods_at_100": round(statistics.fmean(r["failed_pods_at_100"] for r in mine), 1)
            if mine
            else 0,
            "seeds": [r["seed"] for r in mine],
            "per_seed": {str(r["seed"]): round(r["unallocated_at_100"], 4) for r in mine},
            "fragmentation_at_100": (
                {
                    "frag_pct": _mean_sd([f["frag_pct"] for f in frags]),
                    "frag_rate": _mean_sd([f["frag_rate"] for f in frags]),
                }
                if frags
                else None
            ),
            "seconds": round(sum(r["seconds"] for r in mine), 2),
        }
    return out


# ---- offline references (engine/offline.py) --------------------------------------------------------


def offline_once(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    seed: int,
    time_limit: float = 5.0,
    bound_seconds: float = BOUND_SECONDS,
) -> dict:
    """LP bounds and hindsight packing for one seed's arrived workload at 100 %, in unallocated %.

    The bound is the least of the aggregated LP, the card-pattern LP and (``bound_seconds`` > 0) the
    node-pattern LP (``node_bound``: CPU and memory per node), each valid on its own."""
    from . import node_bound, offline

    capacity = sum(n.gpus for n in nodes) * WHOLE
    arrived = offline.arrived_at_100(workload(pods, seed, capacity), capacity)
    scale = 100.0 / capacity if capacity else 0.0
    aggregate = offline.lp_bound(nodes, arrived)
    lp = offline.card_lp_bound(nodes, arrived)
    node = None
    if bound_seconds > 0:
        node = node_bound.node_lp_bound(
            nodes, arrived, time_limit=bound_seconds, type_duals=lp["type_duals"], class_mix=lp["class_mix"]
        )
    packed = offline.hindsight(lambda: build_snapshot(nodes), arrived, to_request, time_limit=time_limit)
    bounds = [x["allocated"] for x in (lp, aggregate, node) if x and x["allocated"] is not None]
    return {
        "seed": seed,
        "arrived_pct": sum(p.gpu for p in arrived) * scale,
        # every LP bounds every placement, so the least is the bound
        "bound": 100.0 - min(bounds) * scale if bounds else None,
        "bound_card": 100.0 - lp["allocated"] * scale,
        "bound_node": 100.0 - node["allocated"] * scale if node else None,
        # the restricted master's own packing (an LP point): what a bound of this kind could still reach
        "bound_node_primal": 100.0 - node["lp_value"] * scale if node else None,
        "node_status": node["status"] if node else "skipped",
        "node_rounds": node["rounds"] if node else 0,
        "node_seconds": node["seconds"] if node else 0.0,
        "bound_aggregate": 100.0 - aggregate["allocated"] * scale
        if aggregate["allocated"] is not None
        else None,
        "hindsight": 100.0 - packed["allocated"] * scale,
        "hindsight_greedy": 100.0 - packed["greedy_allocated"] * scale,
        "hindsight_moves": packed["moves"],
        "hindsight_start": packed["start"],
        "lp_status": lp["status"],
        "lp_rounds": lp["rounds"],
        "lp_card_patterns": lp["card_patterns"],
        "bound_seconds": lp["seconds"] + aggregate["seconds"] + (node["seconds"] if node else 0.0),
        "hindsight_seconds": packed["seconds"],
        "seconds": lp["seconds"]
        + aggregate["seconds"]
        + packed["seconds"]
        + (node["seconds"] if node else 0.0),
    }


def _offline_job(args: tuple) -> dict:
    return offline_once(*args)


def offline_references(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    *,
    results: dict[str, dict] | None = None,
    time_limit: float = 5.0,
    jobs: int = 1,
    bound_seconds: float = BOUND_SECONDS,
) -> dict:
    """Per seed and mean ± sd: the LP bound and the hindsight packing (unallocated GPU % at arrived =
    100 %), and, given the online ``results``, the gap of the best online policy to each (points)."""
    tasks = [(nodes, pods, seed, time_limit, bound_seconds) for seed in seeds]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            runs = list(pool.map(_offline_job, tasks))
    else:
        runs = [_offline_job(t) for t in tasks]
    out: dict = {"seeds": list(seeds), "per_seed": {}}
    for key in ("bound", "bound_aggregate", "bound_card", "bound_node", "hindsight", "hindsight_greedy"):
        vals = [r[key] for r in runs if r[key] is not None]
        out[key] = _mean_sd(vals)
    out["per_seed"] = {
        str(r["seed"]): {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "seed"}
        for r in runs
    }
    if results:
        best = min(results, key=lambda name: results[name]["unallocated_at_100"]["mean"])
        online = results[best]["unallocated_at_100"]["mean"]
        out["best_online"] = best
        out["best_online_unallocated"] = online
        out["gap_to_bound"] = round(online - out["bound"]["mean"], 4)
        out["gap_to_hindsight"] = round(online - out["hindsight"]["mean"], 4)
    return out


def format_offline(ref: dict) -> str:
    b, h = ref["bound"], ref["hindsight"]
    lines = [
        "offline references for the same arrived workload at 100 % (unallocated GPU %, lower is better):",
        f"{'lp-bound':<10} {b['mean']:>24.2f} ± {b['sd']:<5.2f}   (least of the LPs: no placement can do better)",
        f"{'hindsight':<10} {h['mean']:>24.2f} ± {h['sd']:<5.2f}   (best packing found knowing every pod)",
    ]
    for key, label in (
        ("bound_card", "card-pattern LP"),
        ("bound_node", "node-pattern LP, CPU/memory per node"),
    ):
        got = ref.get(key)
        if got and ref["per_seed"] and all(r.get(key) is not None for r in ref["per_seed"].values()):
            lines.append(f"{'(' + label + ')':<36} {got['mean']:.2f} ± {got['sd']:.2f}")
    agg = ref.get("bound_aggregate")
    if agg:
        lines.append(f"{'(aggregate LP bound, no card packing)':<36} {agg['mean']:.2f} ± {agg['sd']:.2f}")
    if "best_online" in ref:
        lines.append(
            f"best online policy {ref['best_online']} ({ref['best_online_unallocated']:.2f} %): "
            f"{ref['gap_to_bound']:+.2f} points from the bound, {ref['gap_to_hindsight']:+.2f} from hindsight"
        )
    return "\n".join(lines)


def format_report(results: dict[str, dict], published: dict[str, float] | None = None) -> str:
    lines = []
    head = f"{'policy':<10} {'unallocated GPU % @ arrived=100':>32} {'failed pods':>12}"
    if published is not None:
        head += f" {'published':>10}"
    lines.append(head)
    for name, res in results.items():
        u = res["unallocated_at_100"]
        line = f"{name:<10} {u['mean']:>24.2f} ± {u['sd']:<5.2f} {res['failed_pods']:>12}"
        if published is not None:
            pub = published.get(name)
            line += f" {pub:>10.2f}" if pub is not None else f" {'-':>10}"
        lines.append(line)
    lines.append("")
    lines.append("allocated GPU % by arrived % (mean over seeds):")
    points = [str(x) for x in (75, 80, 85, 90, 94, 95, 96, 97, 98, 100, 105, 110, 120, 130)]
    lines.append(f"{'policy':<10} " + " ".join(f"{p:>6}" for p in points))
    for name, res in results.items():
        cells = [f"{res['curve'][p]:>6.2f}" if p in res["curve"] else f"{'-':>6}" for p in points]
        lines.append(f"{name:<10} " + " ".join(cells))
    return "\n".join(lines)


# ---- command line -----------------------------------------------------------------------------------


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds.extend(range(int(lo), int(hi) + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds given")
    return seeds


def build_parser(prog: str = "simulate") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Replay a GPU-sharing trace (Alibaba openb format) through the Suanchi engine."
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nodes", default=str(DEFAULT_NODES), help="node list CSV (sn,cpu_milli,memory_mib,gpu,model)"
    )
    parser.add_argument(
        "--pods", default=str(DEFAULT_PODS), help="pod list CSV (full trace format or the 5-column variant)"
    )
    parser.add_argument(
        "--policy",
        default=BEST,
        help=f"comma-separated policies: {', '.join(policy_names())} (default {BEST})",
    )
    parser.add_argument(
        "--seeds", type=parse_seeds, default=list(DEFAULT_SEEDS), help="e.g. 42-51 or 42,43 (default 42-51)"
    )
    parser.add_argument(
        "--json", dest="json_out", default=None, help="write the results as JSON to this file"
    )
    parser.add_argument(
        "--ratio",
        type=float,
        default=INFLATION,
        help="inflate the workload to this × GPU capacity (default 1.3)",
    )
    parser.add_argument(
        "--tie-break",
        dest="tie_break",
        choices=("order", "random"),
        default="order",
        help="exact score ties: first node in the node list (default; reproduces the published baselines) or random",
    )
    parser.add_argument(
        "--mig",
        default=None,
        help="model every card as a MIG card of this geometry (e.g. A100-80GB; default off)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no per-seed progress lines")
    parser.add_argument(
        "--no-offline",
        dest="offline",
        action="store_false",
        help="skip the offline references (LP bound, hindsight packing)",
    )
    parser.add_argument(
        "--hindsight-seconds",
        type=float,
        default=5.0,
        help="time limit of the hindsight local search per seed (default 5)",
    )
    parser.add_argument(
        "--bound-seconds",
        type=float,
        default=BOUND_SECONDS,
        help="time of the node-pattern LP bound per seed (valid when stopped; 0 = skip; default 30)",
    )


def main(argv: Sequence[str] | None = None, stdout=None) -> int:
    args = build_parser().parse_args(argv)
    return execute(args, stdout or sys.stdout)


def execute(args: argparse.Namespace, stdout) -> int:
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for name in policies:
        try:
            get_policy(name)
        except ValueError as exc:
            print(str(exc), file=stdout)
            return 2
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods)
    print(
        f"{len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs; {len(pods)} pods; seeds {args.seeds[0]}…{args.seeds[-1]} ({len(args.seeds)})",
        file=stdout,
    )

    def progress(res: dict) -> None:
        if not args.quiet:
            print(
                f"  {res['policy']:<10} seed {res['seed']}: unallocated {res['unallocated_at_100']:.2f} %, "
                f"{res['failed_pods']} failed pods, {res['seconds']:.1f} s",
                file=stdout,
                flush=True,
            )

    results = run_benchmark(
        nodes,
        pods,
        policies,
        args.seeds,
        ratio=args.ratio,
        jobs=max(1, args.jobs),
        progress=progress,
        tie_break=getattr(args, "tie_break", "order"),
        mig=getattr(args, "mig", None),
    )
    print(format_report(results), file=stdout)
    if getattr(args, "offline", True) and not getattr(args, "mig", None):
        ref = offline_references(
            nodes,
            pods,
            args.seeds,
            results=results,
            time_limit=getattr(args, "hindsight_seconds", 5.0),
            jobs=max(1, args.jobs),
            bound_seconds=getattr(args, "bound_seconds", BOUND_SECONDS),
        )
        print("", file=stdout)
        print(format_offline(ref), file=stdout)
        results = {**results, "offline": ref}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
        print(f"wrote {args.json_out}", file=stdout)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
