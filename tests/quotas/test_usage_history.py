"""A project's used and borrowed CU at each step of its history (``usage_history``, the quotas page's
chart and the history API): summed in one pass over the allocations (each held from the first step
at or after its start up to the first step at or after its release), it gives at every step what
the allocations held at that instant counted one by one, starts and releases exactly on a step,
before the window and after it included."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from apps.inventory.models import Device
from apps.jobs.models import Allocation
from apps.quotas.selectors import usage_history

pytestmark = pytest.mark.django_db


def held_at(project, at):
    used = borrowed = Decimal(0)
    for a in Allocation.objects.filter(project=project):
        if a.started_at <= at and (a.released_at is None or a.released_at > at):
            used += a.compute_units
            borrowed += a.compute_units if a.borrowed else 0
    return used, borrowed


def test_each_step_holds_what_the_allocations_held_at_that_instant(
    fleet, research, make_project, make_job, make_allocation
):
    vision, other = make_project("vision", department=research), make_project("other", department=research)
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    step = dt.timedelta(hours=6)
    end = start + 8 * step
    devices = list(Device.objects.order_by("pk")[:8])
    h = dt.timedelta(hours=1)
    spans = [  # (start, release or None, borrowed)
        (start - 10 * h, None, False),  # before the window, still held
        (start - 10 * h, start, False),  # released right at the first step: not held there
        (start, start + step, True),  # exactly one step: held at step 0 only
        (start + step - dt.timedelta(microseconds=1), start + 3 * step, False),
        (start + 2 * step + h, start + 2 * step + 2 * h, True),  # between two steps: never seen
        (start + 5 * step, end + h, True),  # on a step, released after the window
        (end - h, None, False),  # after the last step but one
    ]
    for (began, released, borrowed), device in zip(spans, devices, strict=False):
        allocation = make_allocation(make_job(vision), device, began, released)
        Allocation.objects.filter(pk=allocation.pk).update(borrowed=borrowed)
    make_allocation(make_job(other), devices[7], start, None)  # another project's: not counted
    points = usage_history(project=vision, start=start, end=end, step=step)
    assert [p["at"] for p in points] == [start + i * step for i in range(9)]
    for point in points:
        assert (point["used"], point["borrowed"]) == held_at(vision, point["at"]), point["at"]
    assert {p["used"] for p in points} != {points[0]["used"]}  # the use changes over the window
    assert any(p["borrowed"] for p in points)


def test_decayed_usage_summed_per_start_and_release_is_each_allocations_integral(
    fleet, research, make_project, make_job, make_allocation
):
    """``decayed_usage`` sums the allocations per project, start and release before taking the
    exponentials (a cycle's cards share their start): the same CU-hours as integrating every
    allocation on its own, 2^(-age / half-life) over its interval, released ones and running ones."""
    import math

    from apps.quotas.selectors import decayed_usage, half_life_hours

    vision, nlp = make_project("vision", department=research), make_project("nlp", department=research)
    now = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
    h = dt.timedelta(hours=1)
    devices = list(Device.objects.order_by("pk")[:8])
    plan = [  # (project, start, release, CU): two cards of one cycle, running and released, a slice
        (vision, now - 30 * h, None, "1"),
        (vision, now - 30 * h, None, "1"),
        (vision, now - 200 * h, now - 100 * h, "0.8"),
        (vision, now - 200 * h, now - 100 * h, "1"),
        (nlp, now - 5 * h, now - 2 * h, "0.25"),
        (nlp, now + h, None, "1"),  # starts after ``now``: nothing yet
    ]
    for (project, start, end, cu), device in zip(plan, devices, strict=False):
        make_allocation(make_job(project), device, start, end, units=Decimal(cu))
    k = math.log(2) / half_life_hours()
    expected = {vision.pk: 0.0, nlp.pk: 0.0}
    for project, start, end, cu in plan:
        end_age = max((now - (end or now)).total_seconds() / 3600, 0.0)
        start_age = max((now - start).total_seconds() / 3600, 0.0)
        expected[project.pk] += float(cu) * (math.exp(-k * end_age) - math.exp(-k * start_age)) / k
    usage = decayed_usage([vision.pk, nlp.pk], now=now)
    assert usage.keys() == expected.keys()
    for pk, value in expected.items():
        assert usage[pk] == pytest.approx(value, rel=1e-12)
    assert usage[vision.pk] > 30 and usage[nlp.pk] > 0.5
    assert decayed_usage([], now=now) == {}  # no project asked for (the cycle with nothing queued)
