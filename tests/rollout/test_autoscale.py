"""Autoscaling: the pure evaluator (windows, cooldown, buffer, bounds), a noisy-curve replay against a
naive threshold policy, and a service scaled end to end from its measured utilization."""

from __future__ import annotations

import pytest

from apps.rollout.autoscale import (
    DOWN,
    HOLD,
    UP,
    Policy,
    Sample,
    evaluate,
    naive_evaluate,
    noisy_curve,
    simulate,
    trend_curve,
    window_mean,
)

P = Policy(max_replicas=10)


def flat(util: float, *, until: float, minutes: int, span: int = 60) -> list[Sample]:
    return [Sample(at=until - i * span, util_pct=util, span_s=span) for i in range(minutes * 60 // span)]


def test_it_scales_up_only_after_five_minutes_above_80():
    now = 10_000.0
    assert (
        evaluate(P, flat(95, until=now, minutes=4), now=now, current=2).action == HOLD
    )  # window not covered
    decision = evaluate(P, flat(95, until=now, minutes=5), now=now, current=2)
    assert (decision.action, decision.target) == (UP, 3)
    assert decision.up_window_pct == pytest.approx(95)


def test_one_spike_in_the_window_does_not_scale():
    now = 10_000.0
    samples = flat(60, until=now, minutes=5)
    samples[0] = Sample(at=now, util_pct=100, span_s=60)
    assert evaluate(P, samples, now=now, current=2).action == HOLD


def test_it_scales_down_only_after_thirty_minutes_below_20():
    now = 100_000.0
    assert evaluate(P, flat(10, until=now, minutes=25), now=now, current=4).action == HOLD
    decision = evaluate(P, flat(10, until=now, minutes=30), now=now, current=4)
    assert (decision.action, decision.target) == (DOWN, 3)


def test_the_buffer_refuses_a_scale_down_that_would_bounce_back():
    now = 100_000.0
    policy = Policy(down_threshold_pct=45, up_threshold_pct=80, buffer_pct=10, max_replicas=10)
    # 40 % on 2 replicas = 80 % on one: within the buffer below the up threshold.
    decision = evaluate(policy, flat(40, until=now, minutes=30), now=now, current=2)
    assert decision.action == HOLD and "buffer" in decision.reason
    assert decision.projected_pct == pytest.approx(80)
    # 30 % on 2 = 60 % on one: fine.
    assert evaluate(policy, flat(30, until=now, minutes=30), now=now, current=2).action == DOWN


def test_cooldown_and_samples_older_than_the_last_change_are_ignored():
    now = 10_000.0
    samples = flat(95, until=now, minutes=10)
    assert "cooling down" in evaluate(P, samples, now=now, current=3, last_scaled_at=now - 300).reason
    # Out of cooldown, but only 4 minutes measured since the change: no decision yet.
    policy = Policy(cooldown_s=0, max_replicas=10)
    assert evaluate(policy, samples, now=now, current=3, last_scaled_at=now - 240).action == HOLD
    assert evaluate(policy, samples, now=now, current=3, last_scaled_at=now - 360).action == UP


def test_bounds_step_and_stale_data():
    now = 10_000.0
    assert evaluate(Policy(min_replicas=2), [], now=now, current=1).target == 2
    assert evaluate(Policy(max_replicas=3), [], now=now, current=5).target == 3
    assert (
        evaluate(Policy(max_replicas=4, step=2), flat(95, until=now, minutes=5), now=now, current=3).target
        == 4
    )
    stale = flat(95, until=now - 1200, minutes=5)
    assert "stale" in evaluate(P, stale, now=now, current=2).reason
    assert evaluate(P, flat(95, until=now, minutes=5), now=now, current=10).action == HOLD


def test_window_mean_weights_by_time_and_needs_coverage():
    samples = [Sample(at=300, util_pct=100, span_s=60), Sample(at=240, util_pct=0, span_s=240)]
    assert window_mean(samples, end=300, length=300) == pytest.approx(20)
    assert window_mean(samples[:1], end=300, length=300) is None


def test_policy_problems_name_the_fields():
    assert "down_threshold_pct" in Policy(up_threshold_pct=60, down_threshold_pct=70).problems()
    assert "max_replicas" in Policy(min_replicas=5, max_replicas=2).problems()
    assert Policy().problems() == {}


def test_a_noisy_curve_gives_far_fewer_scale_events_than_a_naive_policy_while_following_the_trend():
    demand = noisy_curve(seed=7)
    naive = simulate(naive_evaluate, P, demand)
    ours = simulate(evaluate, P, demand)
    print(
        f"\nscale events on a noisy day: naive {naive.scale_events} ({naive.reversals} reversals), "
        f"suanchi {ours.scale_events} ({ours.reversals} reversals)"
    )
    assert ours.scale_events * 5 <= naive.scale_events
    assert ours.reversals <= 2 < naive.reversals
    trend = trend_curve(demand)
    hour = 60  # ticks
    # Quiet morning: few replicas; daytime peak: close to the trend; night: back down.
    assert max(ours.replicas[: 5 * hour]) <= 2
    peak = max(range(len(trend)), key=trend.__getitem__)
    assert ours.replicas[peak] >= trend[peak] / 0.8 - 1
    assert max(ours.replicas) <= P.max_replicas
    assert ours.replicas[-1] < max(ours.replicas) / 2
    # Up moves happen while the trend rises, down moves after the peak.
    assert all(b > a for at, a, b in ours.events if at / 60 < peak)
    assert all(b < a for at, a, b in ours.events if at / 60 > peak + 2 * hour)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_replay_holds_for_other_noise(seed):
    demand = noisy_curve(seed=seed)
    naive, ours = simulate(naive_evaluate, P, demand), simulate(evaluate, P, demand)
    assert ours.scale_events * 5 <= naive.scale_events
    assert max(ours.replicas) >= 6
