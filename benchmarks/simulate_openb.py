"""Every scheduling policy on the Alibaba GPU trace (openb, default pod list), 10 seeds.

Prints, per policy, the unallocated GPU % at arrived = 100 % (mean ± sd over seeds 42…51) from this
run, next to the figure the trace's authors published for the same method where one exists (labelled
"published"), then the allocation curve. Figures only: nothing is asserted.

    python benchmarks/simulate_openb.py [--seeds 42-51] [--policies a,b] [--jobs 1] [--json out.json]
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args(argv)

    policies = [p for p in args.policies.split(",") if p]
    nodes = simulate.load_nodes(args.nodes)
    pods = simulate.load_pods(args.pods)
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
    print()
    print(f"{len(policies)} policies × {len(args.seeds)} seeds in {elapsed:.0f} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
