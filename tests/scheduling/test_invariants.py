"""The capacity invariant over time (apps.scheduling.invariants): the scheduler's rules, swept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apps.scheduling.invariants import AllocationInterval, DeviceLimits, capacity_violations

T0 = datetime(2026, 11, 5, tzinfo=UTC)
H = timedelta(hours=1)
CARD = {1: DeviceLimits(memory_mib=81920, overcommit_pct=100, label="a100#0")}


def _a(pk, start, end, *, memory=40960, milli=428, isolation="hard", whole=False, device=1):
    return AllocationInterval(
        allocation_id=pk,
        device_id=device,
        start=T0 + start * H,
        end=None if end is None else T0 + end * H,
        memory_mib=81920 if whole else memory,
        compute_milli=1000 if whole else milli,
        isolation=isolation,
        whole_card=whole,
    )


def test_a_whole_card_overlapping_a_slice_is_reported_with_its_stretch():
    found = capacity_violations([_a(1, 0, 10), _a(2, 6, 30, whole=True)], CARD)
    assert len(found) == 1
    v = found[0]
    assert (v.device, v.start, v.end, v.allocations) == ("a100#0", T0 + 6 * H, T0 + 10 * H, [1, 2])
    assert "whole card" in v.exceeded and "memory" in v.exceeded


def test_back_to_back_and_zero_length_allocations_do_not_overlap():
    rows = [_a(1, 0, 5, whole=True), _a(2, 5, 9, whole=True), _a(3, 7, 7, whole=True)]
    assert capacity_violations(rows, CARD) == []


def test_two_slices_that_fit_are_fine_and_a_third_exceeds_memory_and_compute():
    assert capacity_violations([_a(1, 0, 10), _a(2, 0, 10)], CARD) == []
    found = capacity_violations([_a(1, 0, 10), _a(2, 0, 10), _a(3, 2, 4)], CARD)
    assert [(v.allocations, v.exceeded) for v in found] == [([1, 2, 3], ["memory", "compute"])]
    assert found[0].peak_memory_mib == 3 * 40960 and found[0].peak_hard_milli == 3 * 428


def test_the_overcommit_factor_counts_for_shared_slices_only():
    pooled = {1: DeviceLimits(memory_mib=81920, overcommit_pct=150)}
    shared = [_a(pk, 0, 10, memory=10000, milli=500, isolation="shared") for pk in (1, 2, 3)]
    assert capacity_violations(shared, pooled) == []  # 1500 shared ≤ 1000 × 150 %
    hard = [_a(pk, 0, 10, memory=10000, milli=500) for pk in (1, 2, 3)]
    assert [v.exceeded for v in capacity_violations(hard, pooled)] == [["compute"]]
    assert [v.exceeded for v in capacity_violations(shared, CARD)] == [["compute"]]


def test_an_open_allocation_runs_on_and_cards_are_checked_separately():
    rows = [_a(1, 0, None, whole=True), _a(2, 100, 101, whole=True), _a(3, 100, 101, whole=True, device=2)]
    found = capacity_violations(rows, CARD)
    assert [(v.device_id, v.allocations, v.end) for v in found] == [(1, [1, 2], T0 + 101 * H)]
