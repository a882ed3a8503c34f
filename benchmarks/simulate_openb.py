"""Every scheduling policy on the Alibaba GPU trace (openb, default pod list), 10 seeds.

Prints, per policy, the unallocated GPU % at arrived = 100 % (mean ± sd over seeds 42…51) from this
run, next to the figure the trace's authors published for the same method where one exists (labelled
"published"), then the allocation curve. Figures only: nothing is asserted.

    python benchmarks/simulate_openb.py [--seeds 42-51] [--policies a,b] [--jobs 1] [--json out.json]
        [--variant default|no-models] [--no-offline] [--hindsight-seconds 5]

Then the offline references for the same arrived workload at 100 % (``engine/offline.py``): the
card-level LP bound no placement can beat (beside the looser aggregated LP) and the best packing found
with full hindsight, with the gap of the best online policy to each. The default trace has no GPU-model
constraint (its ``gpu_spec`` is empty), so ``--variant no-models`` replays the same pods on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.scheduling.engine import simulate  # noqa: E402
from apps.scheduling.engine.policies import BEST, policy_names  # noqa: E402

# Weng et al., USENIX ATC '23, default trace, arrived = 100 %, mean of 10 seeds (README of the trace).
PUBLISHED = {
    "random": ("Random fit", 13.70),
    "dotprod": ("Dot product", 9.38),
    "clustering": ("GPU clustering", 8.35),
    "packing": ("GPU packing", 8.22),
    "bestfit": ("Best fit", 7.14),
    "fgd": ("FGD (paper's policy)", 4.77),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=simulate.parse_seeds, default=list(simulate.DEFAULT_SEEDS))
    parser.add_argument("--policies", default=",".join(policy_names()))
    parser.add_argument("--nodes", default=str(simulate.DEFAULT_NODES))
    parser.add_argument("--pods", default=str(simulate.DEFAULT_PODS))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--tie-break", dest="tie_break", choices=("order", "random"), default="order")
    parser.add_argument("--json", dest="json_out", default=None)
    parser.add_argument(
        "--variant",
        choices=("default", "no-models"),
        default="default",
        help="no-models: the same pods without their GPU-model constraint (the 5-column variant)",
    )
    parser.add_argument(
        "--no-offline", dest="offline", action="store_false", help="skip the offline references"
    )
    parser.add_argument("--hindsight-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)

    policies = [p for p in args.policies.split(",") if p]
    nodes = simulate.load_nodes(args.nodes)
    pods = simulate.load_pods(args.pods)
    if args.variant == "no-models":
        pods = [dataclasses.replace(p, models=frozenset()) for p in pods]
    print(
        f"trace: {len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs, {len(pods)} pods; "
        f"seeds {args.seeds}; exact score ties go to the {'first node in list order' if args.tie_break == 'order' else 'a random node'}"
    )
    started = time.perf_counter()

    def progress(res: dict) -> None:
        print(
            f"  {res['policy']:<9} seed {res['seed']}: {res['unallocated_at_100']:6.2f} % unallocated, "
            f"{res['failed_pods']} failed pods, {res['seconds']:.1f} s",
            flush=True,
        )

    results = simulate.run_benchmark(
        nodes, pods, policies, args.seeds, jobs=max(1, args.jobs), progress=progress, tie_break=args.tie_break
    )
    elapsed = time.perf_counter() - started

    print()
    print("Unallocated GPU % at arrived = 100 % (lower is better)")
    print(f"{'policy':<10} {'ours (this run)':>18} {'published':>10}  published as")
    for name, res in results.items():
        u = res["unallocated_at_100"]
        label, pub = PUBLISHED.get(name, ("", None))
        pub_txt = f"{pub:.2f}" if pub is not None else "-"
        best = "  <- Suanchi's policy" if name == BEST else ""
        print(f"{name:<10} {u['mean']:>10.2f} ± {u['sd']:<5.2f} {pub_txt:>10}  {label}{best}")
    for key, (label, pub) in PUBLISHED.items():
        if key not in results:
            print(f"{key:<10} {'(not run)':>18} {pub:>10.2f}  {label}")
    print()
    print(simulate.format_report(results).split("\n\n", 1)[1])
    print()
    print(
        "Fragmentation at arrived = 100 % (paper's measure: idle GPU the 95 % most common shapes cannot use)"
    )
    for name, res in results.items():
        f = res.get("fragmentation_at_100")
        if f:
            print(
                f"{name:<10} {f['frag_pct']['mean']:6.2f} % of capacity, {f['frag_rate']['mean']:6.2f} % of idle GPU"
            )
    if args.offline:
        t0 = time.perf_counter()
        ref = simulate.offline_references(
            nodes,
            pods,
            args.seeds,
            results=results,
            time_limit=args.hindsight_seconds,
            jobs=max(1, args.jobs),
        )
        print()
        print(simulate.format_offline(ref))
        for seed, r in ref["per_seed"].items():
            print(
                f"  seed {seed}: bound {r['bound']:.2f} % (aggregate LP {r['bound_aggregate']:.2f} %, "
                f"{r['lp_rounds']} LP rounds, {r['bound_seconds']:.1f} s), hindsight {r['hindsight']:.2f} % "
                f"(from {r['hindsight_start']}, {r['hindsight_moves']} local-search moves, "
                f"{r['hindsight_seconds']:.1f} s)"
            )
        print(f"offline references in {time.perf_counter() - t0:.0f} s")
        results = {**results, "offline": ref}
    print()
    print(f"{len(policies)} policies × {len(args.seeds)} seeds in {elapsed:.0f} s (variant {args.variant})")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
