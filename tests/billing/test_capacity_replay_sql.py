"""The month close's capacity replay (issue 31 §3): on PostgreSQL one statement sweeps every card's
allocations and only the cards it finds over capacity are replayed in Python; the answer is the one
the Python sweep gives over every card (``capacity_violations``), on a ledger with every kind of
overlap (whole cards, memory, hard and shared compute with the pool's overcommit, zero-length and
still-open allocations, back-to-back ends and starts)."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest

from apps.inventory.models import Device, Pool
from apps.jobs.models import Allocation
from apps.scheduling import invariants
from apps.scheduling.invariants import allocation_capacity_violations
from tests.fixtures.billing import local

T0 = local(2026, 9, 3, 0)
H = timedelta(hours=1)


@pytest.fixture
def project(make_project):
    return make_project("replay")


@pytest.fixture
def busy_ledger(project, devices, make_job, make_allocation):
    """Random allocations on the first 8 cards over three days: about half the cards go over."""
    Pool.objects.filter(slug="training").update(overcommit_factor=Decimal("1.25"))
    rng = random.Random(31)
    job = make_job(project, name="replay")
    for replica, device in enumerate(devices[:8] * 6):
        milli = rng.choice((250, 400, 500, 1000))
        start = T0 + rng.randrange(0, 60) * H + rng.choice((0, 30)) * timedelta(minutes=1)
        end = None if rng.random() < 0.1 else start + rng.choice((0, 1, 2, 5, 9)) * H
        row = make_allocation(job, device, start, end, milli=milli, replica=replica)
        Allocation.objects.filter(pk=row.pk).update(
            isolation=rng.choice(("hard", "shared")), memory_mib=rng.choice((8000, 20000, 40000))
        )
    Device.objects.filter(pk=devices[1].pk).update(device_model=None, memory_mib=30000)
    return devices


@pytest.mark.parametrize(
    "window", [(None, None), (T0 + 7 * H, T0 + 40 * H), (T0 - 24 * H, T0 + 100 * H)], ids=str
)
def test_the_sql_sweep_finds_exactly_the_cards_the_python_sweep_reports(busy_ledger, window):
    start, end = window
    every = invariants.capacity_violations(
        [
            invariants.AllocationInterval(
                allocation_id=a.pk,
                device_id=a.device_id,
                start=max(a.started_at, start) if start else a.started_at,
                end=invariants._clip_end(a.released_at, end),
                memory_mib=a.memory_mib,
                compute_milli=a.compute_milli,
                isolation=a.isolation,
                whole_card=a.whole_card,
            )
            for a in Allocation.objects.all()
            if (end is None or a.started_at < end)
            and (start is None or not a.released_at or a.released_at > start)
        ],
        {
            pk: invariants.DeviceLimits(memory_mib=int(model or own or 0), overcommit_pct=int(factor * 100))
            for pk, model, own, factor in Device.objects.values_list(
                "pk", "device_model__memory_mib", "memory_mib", "node__pool__overcommit_factor"
            )
        },
    )
    found = invariants._devices_over_capacity(start=start, end=end, device_ids=None)
    assert found == sorted({v.device_id for v in every})
    assert 1 <= len(found) < 8  # some cards over, not all
    reported = allocation_capacity_violations(start=start, end=end)
    assert [(v.device_id, v.start, v.end, v.allocations, v.exceeded) for v in reported] == [
        (v.device_id, v.start, v.end, v.allocations, v.exceeded) for v in every
    ]


def test_the_sql_sweep_keeps_to_the_cards_asked_about(busy_ledger):
    over = invariants._devices_over_capacity(start=None, end=None, device_ids=None)
    asked = [over[0], busy_ledger[9].pk]
    assert invariants._devices_over_capacity(start=None, end=None, device_ids=asked) == [over[0]]
    assert {v.device_id for v in allocation_capacity_violations(device_ids=asked)} == {over[0]}


def test_a_fleet_within_capacity_is_answered_by_the_sql_sweep_alone(
    project, devices, make_job, make_allocation
):
    job = make_job(project, name="fits")
    make_allocation(job, devices[0], T0, T0 + 5 * H)
    make_allocation(job, devices[0], T0 + 5 * H, T0 + 9 * H, replica=1)  # back to back: no overlap
    make_allocation(job, devices[1], T0, T0 + 5 * H, milli=500, replica=2)
    make_allocation(job, devices[1], T0, T0 + 5 * H, milli=500, replica=3)
    assert invariants._devices_over_capacity(start=None, end=None, device_ids=None) == []
    assert allocation_capacity_violations() == []
    make_allocation(job, devices[1], T0 + 4 * H, T0 + 4 * H, replica=4)  # zero length: holds nothing
    make_allocation(job, devices[0], T0 + 8 * H, None, replica=5)  # overlaps the second, still open
    assert invariants._devices_over_capacity(start=None, end=None, device_ids=None) == [devices[0].pk]
    (violation,) = allocation_capacity_violations()
    assert (violation.device_id, violation.start, violation.end) == (devices[0].pk, T0 + 8 * H, T0 + 9 * H)
