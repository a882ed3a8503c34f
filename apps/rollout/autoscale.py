"""Autoscaling decisions for inference services. Pure Python: no Django import.

Seed 001 §5.2: scale up when a service's utilization stays above 80 % for 5 minutes, down when it
stays below 20 % for 30 minutes; a 1-minute / 70 % trigger made replicas flap ("扩了又缩"), fixed with a
5-minute window plus a 10 % buffer. The evaluator holds every guard that prevents flapping:

* **windows** — a threshold counts only when the time-weighted mean over the whole window crosses
  it, and only samples taken *after the last scale change* count (load measured with the old
  replica count says nothing about the new one); a window not covered by samples decides nothing;
* **cooldown** — no change at all for ``cooldown_s`` after the last one;
* **buffer** (hysteresis) — a scale-down is refused when the load, spread over fewer replicas,
  would land within ``buffer_pct`` of the up threshold (it would be scaled straight back up);
* **bounds and step** — never below ``min_replicas`` nor above ``max_replicas``, ``step`` at a time.

``evaluate`` decides one tick; ``simulate`` replays a load curve through any decide function in a
closed loop (utilization depends on the replicas the policy chose), for the tests and the
``benchmarks/autoscale_replay.py`` benchmark. ``naive_evaluate`` is the straw man: instantaneous
thresholds, no window, no cooldown, no buffer.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from apps.core.stored_text import stored

UP, DOWN, HOLD = "up", "down", "hold"
# A window counts as measured when samples cover this share of it.
MIN_COVERAGE = 0.9


@dataclass(frozen=True)
class Policy:
    up_threshold_pct: float = 80.0
    up_window_s: int = 300
    down_threshold_pct: float = 20.0
    down_window_s: int = 1800
    cooldown_s: int = 600
    min_replicas: int = 1
    max_replicas: int = 8
    step: int = 1
    buffer_pct: float = 10.0
    # Telemetry older than this (seconds behind ``now``) is not acted on.
    max_staleness_s: int = 900

    def problems(self) -> dict[str, str]:
        """Field → message for an inconsistent policy (empty when it is sound)."""
        out: dict[str, str] = {}
        for name in ("up_threshold_pct", "down_threshold_pct", "buffer_pct"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                out[name] = f"must be between 0 and 100 (got {value:g})"
        if self.down_threshold_pct >= self.up_threshold_pct:
            out["down_threshold_pct"] = (
                f"the scale-down threshold ({self.down_threshold_pct:g} %) must be below the scale-up "
                f"threshold ({self.up_threshold_pct:g} %), or the service would scale both ways at once"
            )
        if self.min_replicas < 1:
            out["min_replicas"] = "at least 1"
        if self.max_replicas < self.min_replicas:
            out["max_replicas"] = (
                f"the maximum ({self.max_replicas}) is below the minimum ({self.min_replicas})"
            )
        if self.step < 1:
            out["step"] = "at least 1"
        for name in ("up_window_s", "down_window_s"):
            if getattr(self, name) < 60:
                out[name] = "at least 60 seconds"
        if self.cooldown_s < 0:
            out["cooldown_s"] = "cannot be negative"
        return out


@dataclass(frozen=True)
class Sample:
    """Mean utilization (0–100 %) of the service's cards over ``span_s`` seconds ending at ``at``."""

    at: float
    util_pct: float
    span_s: float = 300.0


@dataclass(frozen=True)
class Decision:
    action: str  # up | down | hold
    current: int
    target: int
    reason: str
    up_window_pct: float | None = None
    down_window_pct: float | None = None
    projected_pct: float | None = None

    @property
    def changes(self) -> bool:
        return self.target != self.current


def window_mean(samples: Iterable[Sample], *, end: float, length: float) -> float | None:
    """Time-weighted mean over ``(end - length, end]``; None when samples cover less than 90 % of it."""
    start = end - length
    covered = 0.0
    total = 0.0
    for s in samples:
        lo, hi = max(s.at - s.span_s, start), min(s.at, end)
        if hi <= lo:
            continue
        covered += hi - lo
        total += (hi - lo) * s.util_pct
    if covered < length * MIN_COVERAGE:
        return None
    return total / covered


# Decision reasons people read later, in their own language (apps.core.stored_text).
BELOW_MIN = stored("below the minimum of %(min)s")
ABOVE_MAX = stored("above the maximum of %(max)s")
COOLING = stored("cooling down for another %(left)s s after the last change")
NOTHING_SINCE = stored("no utilization measured since the last change")
STALE = stored("utilization is stale (latest sample %(age)s s old)")
AT_MAX = stored("%(mean)s %% over %(minutes)s min, but already at the maximum")
UP_BECAUSE = stored("%(mean)s %% > %(threshold)s %% over %(minutes)s min")
AT_MIN = stored("%(mean)s %% over %(minutes)s min, but already at the minimum")
IN_BUFFER = stored(
    "scaling down to %(target)s would put utilization at %(projected)s %%, within the "
    "%(buffer)s %% buffer below the up threshold"
)
DOWN_BECAUSE = stored("%(mean)s %% < %(threshold)s %% over %(minutes)s min")
NOT_ENOUGH = stored("not enough utilization measured yet for a window")
IN_BAND = stored("utilization within the band")


def evaluate(
    policy: Policy,
    samples: Sequence[Sample],
    *,
    now: float,
    current: int,
    last_scaled_at: float | None = None,
) -> Decision:
    """One decision for a service running ``current`` replicas, given its utilization samples."""

    def hold(reason: str, **extra) -> Decision:
        return Decision(HOLD, current, current, reason, **extra)

    if current < policy.min_replicas:
        return Decision(UP, current, policy.min_replicas, BELOW_MIN % {"min": policy.min_replicas})
    if current > policy.max_replicas:
        return Decision(DOWN, current, policy.max_replicas, ABOVE_MAX % {"max": policy.max_replicas})
    if last_scaled_at is not None and now - last_scaled_at < policy.cooldown_s:
        left = policy.cooldown_s - (now - last_scaled_at)
        return hold(COOLING % {"left": f"{left:.0f}"})
    usable = [
        s for s in samples if s.at <= now and (last_scaled_at is None or s.at - s.span_s >= last_scaled_at)
    ]
    if not usable:
        return hold(NOTHING_SINCE)
    end = max(s.at for s in usable)
    if now - end > policy.max_staleness_s:
        return hold(STALE % {"age": f"{now - end:.0f}"})
    up_mean = window_mean(usable, end=end, length=policy.up_window_s)
    down_mean = window_mean(usable, end=end, length=policy.down_window_s)
    figures = {"up_window_pct": up_mean, "down_window_pct": down_mean}
    if up_mean is not None and up_mean > policy.up_threshold_pct:
        if current >= policy.max_replicas:
            return hold(AT_MAX % {"mean": f"{up_mean:.0f}", "minutes": policy.up_window_s // 60}, **figures)
        target = min(policy.max_replicas, current + policy.step)
        return Decision(
            UP,
            current,
            target,
            UP_BECAUSE
            % {
                "mean": f"{up_mean:.0f}",
                "threshold": f"{policy.up_threshold_pct:g}",
                "minutes": policy.up_window_s // 60,
            },
            projected_pct=up_mean * current / target,
            **figures,
        )
    if down_mean is not None and down_mean < policy.down_threshold_pct:
        if current <= policy.min_replicas:
            return hold(
                AT_MIN % {"mean": f"{down_mean:.0f}", "minutes": policy.down_window_s // 60},
                **figures,
            )
        target = max(policy.min_replicas, current - policy.step)
        projected = down_mean * current / target
        ceiling = policy.up_threshold_pct - policy.buffer_pct
        if projected >= ceiling:
            return hold(
                IN_BUFFER
                % {"target": target, "projected": f"{projected:.0f}", "buffer": f"{policy.buffer_pct:g}"},
                projected_pct=projected,
                **figures,
            )
        return Decision(
            DOWN,
            current,
            target,
            DOWN_BECAUSE
            % {
                "mean": f"{down_mean:.0f}",
                "threshold": f"{policy.down_threshold_pct:g}",
                "minutes": policy.down_window_s // 60,
            },
            projected_pct=projected,
            **figures,
        )
    if up_mean is None and down_mean is None:
        return hold(NOT_ENOUGH, **figures)
    return hold(IN_BAND, **figures)


def naive_evaluate(
    policy: Policy,
    samples: Sequence[Sample],
    *,
    now: float,
    current: int,
    last_scaled_at: float | None = None,
) -> Decision:
    """The straw man: react to the latest sample alone (no window, cooldown or buffer)."""
    latest = max((s for s in samples if s.at <= now), key=lambda s: s.at, default=None)
    if latest is None:
        return Decision(HOLD, current, current, "no sample")
    if latest.util_pct > policy.up_threshold_pct and current < policy.max_replicas:
        return Decision(UP, current, min(policy.max_replicas, current + policy.step), "latest sample above")
    if latest.util_pct < policy.down_threshold_pct and current > policy.min_replicas:
        return Decision(DOWN, current, max(policy.min_replicas, current - policy.step), "latest sample below")
    return Decision(HOLD, current, current, "within the band")


# --------------------------------------------------------------------------------------------------
# Closed-loop replay


@dataclass
class Replay:
    """What a replay did: one replica count per tick, the scale events, and how well it tracked."""

    times: list[float] = field(default_factory=list)
    demand: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    events: list[tuple[float, int, int]] = field(default_factory=list)  # (at, from, to)
    overloaded_ticks: int = 0

    @property
    def scale_events(self) -> int:
        return len(self.events)

    @property
    def reversals(self) -> int:
        """Direction changes between consecutive scale events (up then down, or down then up)."""
        signs = [1 if b > a else -1 for _at, a, b in self.events]
        return sum(1 for x, y in zip(signs, signs[1:], strict=False) if x != y)


Decide = Callable[..., Decision]


def noisy_curve(
    *,
    hours: float = 24.0,
    tick_s: int = 60,
    base: float = 1.0,
    peak: float = 6.0,
    busy_from_h: float = 6.0,
    busy_to_h: float = 18.0,
    noise: float = 0.35,
    spike_every: int = 23,
    seed: int = 7,
) -> list[float]:
    """Demand in "busy replicas" per tick over a day: quiet at ``base``, a daytime rise to ``peak`` and
    fall back, multiplicative Gaussian noise and a short spike every ``spike_every`` ticks.
    Deterministic for a given seed."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible test curve, not cryptography
    ticks = int(hours * 3600 / tick_s)
    out = []
    for i in range(ticks):
        hour = i * tick_s / 3600
        trend = base
        if busy_from_h <= hour <= busy_to_h:
            phase = (hour - busy_from_h) / (busy_to_h - busy_from_h)
            trend += (peak - base) * math.sin(math.pi * phase) ** 2
        value = trend * (1 + rng.gauss(0, noise))
        if spike_every and i % spike_every == 0:
            value *= 1.8
        out.append(max(0.0, value))
    return out


def trend_curve(demand: Sequence[float], *, tick_s: int = 60, window_s: int = 3600) -> list[float]:
    """The demand's moving average over ``window_s`` (what "following the trend" is measured against)."""
    width = max(1, window_s // tick_s)
    out, total = [], 0.0
    for i, value in enumerate(demand):
        total += value
        if i >= width:
            total -= demand[i - width]
        out.append(total / min(i + 1, width))
    return out


def simulate(
    decide: Decide,
    policy: Policy,
    demand: Sequence[float],
    *,
    tick_s: int = 60,
    start_replicas: int | None = None,
) -> Replay:
    """Replay ``demand`` (busy replicas per tick): each tick the service's utilization is
    demand / replicas (capped at 100 %), a sample is taken and ``decide`` may change the replicas."""
    replicas = start_replicas or policy.min_replicas
    samples: list[Sample] = []
    last_scaled: float | None = None
    out = Replay()
    for i, load in enumerate(demand):
        now = float((i + 1) * tick_s)
        util = min(100.0, 100.0 * load / replicas)
        if load > replicas:
            out.overloaded_ticks += 1
        samples.append(Sample(at=now, util_pct=util, span_s=tick_s))
        horizon = now - max(policy.up_window_s, policy.down_window_s) - tick_s
        samples = [s for s in samples if s.at > horizon]
        decision = decide(policy, samples, now=now, current=replicas, last_scaled_at=last_scaled)
        out.times.append(now)
        out.demand.append(load)
        out.utilization.append(util)
        if decision.target != replicas:
            out.events.append((now, replicas, decision.target))
            replicas = decision.target
            last_scaled = now
        out.replicas.append(replicas)
    return out
