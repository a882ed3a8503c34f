"""Autoscaling replay: a noisy day of inference load through Suanchi's policy and naive policies.

The load curve (``apps.rollout.autoscale.noisy_curve``): quiet at 1 busy replica, a daytime rise to 6
and back, ±35 % Gaussian noise per minute and a 1.8× spike every 23 minutes; one tick per minute for
24 hours. The replay is closed-loop: each minute the service's utilization is demand ÷ replicas
(capped at 100 %), and the policy may change the replicas.

Policies (all scale by 1 replica between 1 and 10):

- naive: the latest minute alone, > 80 % up, < 20 % down (no window, cooldown or buffer);
- seed 001 §5.2's first try: > 70 % for 1 minute up, < 20 % for 1 minute down, no cooldown or buffer;
- suanchi: > 80 % for 5 minutes up, < 20 % for 30 minutes down, 10-minute cooldown, 10 % buffer,
  only samples taken after the last change count.

Printed per policy and seed: scale events, direction reversals (flapping), minutes under capacity
(demand above the replicas: requests queue), replica-minutes used, and how far the replicas were from
the trend (the demand's 1-hour moving average ÷ 0.8) on average. Pure Python; nothing is timed.

    python benchmarks/autoscale_replay.py [seeds, default 7 1 2 3 4]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apps.rollout.autoscale import Policy, evaluate, naive_evaluate, noisy_curve, simulate, trend_curve  # noqa: E402

BOUNDS = {"min_replicas": 1, "max_replicas": 10, "step": 1}
POLICIES = [
    ("naive (latest minute, 80/20)", naive_evaluate, Policy(**BOUNDS)),
    (
        "seed 1-min 70 % (no buffer)",
        evaluate,
        Policy(up_threshold_pct=70, up_window_s=60, down_window_s=60, cooldown_s=0, buffer_pct=0, **BOUNDS),
    ),
    ("suanchi (5 min / 30 min, buffer)", evaluate, Policy(**BOUNDS)),
]


def main(seeds: list[int]) -> None:
    header = f"{'seed':>4}  {'policy':<34}{'events':>7}{'reversals':>10}{'under-cap min':>14}{'replica-min':>12}{'|Δ trend|':>10}"
    print(header)
    print("-" * len(header))
    totals: dict[str, list[int]] = {}
    for seed in seeds:
        demand = noisy_curve(seed=seed)
        ideal = [max(1, min(10, math.ceil(t / 0.8))) for t in trend_curve(demand)]
        for name, decide, policy in POLICIES:
            replay = simulate(decide, policy, demand)
            gap = sum(abs(r - i) for r, i in zip(replay.replicas, ideal, strict=True)) / len(ideal)
            totals.setdefault(name, []).append(replay.scale_events)
            print(
                f"{seed:>4}  {name:<34}{replay.scale_events:>7}{replay.reversals:>10}"
                f"{replay.overloaded_ticks:>14}{sum(replay.replicas):>12}{gap:>10.2f}"
            )
    print()
    base = sum(totals[POLICIES[0][0]])
    for name, events in totals.items():
        print(
            f"{name:<34} {sum(events):>5} scale events over {len(seeds)} days ({sum(events) / base:.0%} of naive)"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [7, 1, 2, 3, 4])
