"""The capacity invariant over time: no card's overlapping allocations ever exceed it.

The scheduler enforces the invariant for the allocations that are active *now* (``engine/fleet.py``,
``allocations._fits``). History can still break it (rows written by hand, an import, a demo generator, a
read-back correction), and a bill must never charge usage that could not have happened. This module
checks a whole stretch of history with the same rules as the scheduler:

* a whole card excludes every other allocation on it;
* memory is never overcommitted: the memory of overlapping allocations ≤ the card's memory
  (the device model's, else the tool-reported one; a card with no known memory is not checked);
* compute is never over-sold: ``hard × F + shared × 100 ≤ 1000 × F`` (milli of one card), ``F`` the
  pool's overcommit factor in percent (100 … 150, shared slices only; ``engine/share.py``).

It is a sweep per device: each allocation is a half-open interval ``[started_at, released_at)``
(an allocation released at T and one started at T do not overlap); the start and end events are
sorted and replayed with running totals, so the cost is O(n log n) for n allocations. Every stretch
during which a card is over its capacity is one :class:`CapacityViolation` (card, from, until, every
allocation active in it, what was exceeded).

``capacity_violations`` is pure Python (no queries); ``allocation_capacity_violations`` reads the
allocations that overlap a time window from the database and runs it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from apps.scheduling.engine.share import WHOLE, overcommit_pct, share_fits

HARD = "hard"
SHARED = "shared"


@dataclass(frozen=True)
class AllocationInterval:
    """One allocation as the sweep sees it; ``end`` None = still active."""

    allocation_id: int
    device_id: int
    start: datetime
    end: datetime | None
    memory_mib: int
    compute_milli: int
    isolation: str = HARD
    whole_card: bool = False
    job_id: int | None = None


@dataclass(frozen=True)
class DeviceLimits:
    """A card's capacity: memory (MiB, 0 = unknown) and its pool's overcommit factor in percent."""

    memory_mib: int
    overcommit_pct: int = 100
    label: str = ""


@dataclass
class CapacityViolation:
    device_id: int
    device: str
    start: datetime
    end: datetime | None  # when the card was back within its capacity; None = still over
    allocations: list[int] = field(default_factory=list)
    exceeded: list[str] = field(default_factory=list)
    peak_memory_mib: int = 0
    memory_mib: int = 0
    peak_hard_milli: int = 0
    peak_shared_milli: int = 0
    overcommit_pct: int = 100

    def as_dict(self) -> dict:
        return {
            "device_id": self.device_id,
            "device": self.device,
            "from": self.start.isoformat(),
            "until": self.end.isoformat() if self.end else None,
            "allocations": self.allocations,
            "exceeded": self.exceeded,
            "memory_mib": {"peak": self.peak_memory_mib, "capacity": self.memory_mib},
            "compute_milli": {
                "hard": self.peak_hard_milli,
                "shared": self.peak_shared_milli,
                "overcommit_pct": self.overcommit_pct,
            },
        }

    def describe(self) -> str:
        ids = ", ".join(str(pk) for pk in self.allocations)
        return (
            f"{self.device} at {self.start.isoformat()}: allocations {ids} exceed {', '.join(self.exceeded)}"
        )


def _exceeded(
    *, whole: int, count: int, memory: int, hard: int, shared: int, limits: DeviceLimits
) -> list[str]:
    problems = []
    if whole and count > 1:
        problems.append("whole card")
    if limits.memory_mib > 0 and memory > limits.memory_mib:
        problems.append("memory")
    factor = limits.overcommit_pct
    if not share_fits(hard, shared, factor):
        problems.append("compute")
    return problems


def _device_sweep(device_id: int, intervals: list[AllocationInterval], limits: DeviceLimits):
    # (time, 0 = end / 1 = start, allocation): ends sort before starts at the same instant.
    events: list[tuple] = []
    for interval in intervals:
        if interval.end is not None and interval.end <= interval.start:
            continue  # an allocation released the moment it started held nothing
        events.append((interval.start, 1, interval.allocation_id, interval))
        if interval.end is not None:
            events.append((interval.end, 0, interval.allocation_id, interval))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    active: dict[int, AllocationInterval] = {}
    whole = memory = hard = shared = 0
    current: CapacityViolation | None = None
    for moment, kind, pk, interval in events:
        sign = 1 if kind else -1
        if kind:
            active[pk] = interval
        else:
            active.pop(pk, None)
        memory += sign * interval.memory_mib
        if interval.whole_card:
            whole += sign
        elif interval.isolation == SHARED:
            shared += sign * interval.compute_milli
        else:
            hard += sign * interval.compute_milli
        problems = _exceeded(
            whole=whole, count=len(active), memory=memory, hard=hard, shared=shared, limits=limits
        )
        if problems:
            if current is None:
                current = CapacityViolation(
                    device_id=device_id,
                    device=limits.label or f"device {device_id}",
                    start=moment,
                    end=None,
                    memory_mib=limits.memory_mib,
                    overcommit_pct=limits.overcommit_pct,
                )
                current.allocations = sorted(active)
            elif kind:
                current.allocations.append(pk)
            for problem in problems:
                if problem not in current.exceeded:
                    current.exceeded.append(problem)
            current.peak_memory_mib = max(current.peak_memory_mib, memory)
            current.peak_hard_milli = max(current.peak_hard_milli, hard)
            current.peak_shared_milli = max(current.peak_shared_milli, shared)
        elif current is not None:
            current.end = moment
            yield current
            current = None
    if current is not None:
        yield current


def capacity_violations(
    intervals: Iterable[AllocationInterval], limits: Mapping[int, DeviceLimits]
) -> list[CapacityViolation]:
    """Every stretch of time a card spent over its capacity, by device then time.

    A device missing from ``limits`` is checked for whole-card exclusivity and compute only."""
    by_device: dict[int, list[AllocationInterval]] = defaultdict(list)
    for interval in intervals:
        by_device[interval.device_id].append(interval)
    found: list[CapacityViolation] = []
    for device_id in sorted(by_device):
        device_limits = limits.get(device_id) or DeviceLimits(memory_mib=0)
        found.extend(_device_sweep(device_id, by_device[device_id], device_limits))
    return found


def allocation_capacity_violations(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    device_ids: Iterable[int] | None = None,
    extra: Iterable[AllocationInterval] = (),
) -> list[CapacityViolation]:
    """Check the stored allocations that overlap ``[start, end)`` (all of history when both are None),
    clipped to the window, plus ``extra`` intervals (planned rows not yet written)."""
    from django.db import connection
    from django.db.models import Q

    from apps.inventory.models import Device
    from apps.jobs.models import Allocation

    extra = list(extra)
    if device_ids is not None:
        device_ids = list(device_ids)
    if connection.vendor == "postgresql" and not extra:
        # One pass in SQL finds the cards that ever went over; only theirs are replayed here.
        device_ids = _devices_over_capacity(start=start, end=end, device_ids=device_ids)
        if not device_ids:
            return []
    rows = Allocation.objects.order_by()
    if end is not None:
        rows = rows.filter(started_at__lt=end)
    if start is not None:
        rows = rows.filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
    if device_ids is not None:
        rows = rows.filter(device_id__in=device_ids)
    intervals: list[AllocationInterval] = []
    for pk, device_id, job_id, began, released, memory, compute, isolation, whole in rows.values_list(
        "pk",
        "device_id",
        "job_id",
        "started_at",
        "released_at",
        "memory_mib",
        "compute_milli",
        "isolation",
        "whole_card",
    ).iterator(chunk_size=5000):
        intervals.append(
            AllocationInterval(
                allocation_id=pk,
                device_id=device_id,
                job_id=job_id,
                start=max(began, start) if start is not None else began,
                end=_clip_end(released, end),
                memory_mib=memory,
                compute_milli=compute,
                isolation=isolation,
                whole_card=whole,
            )
        )
    intervals.extend(extra)
    wanted = {interval.device_id for interval in intervals}
    limits: dict[int, DeviceLimits] = {}
    for pk, node_name, vendor, index, memory, model_memory, factor in Device.objects.filter(
        pk__in=wanted
    ).values_list(
        "pk",
        "node__name",
        "vendor",
        "index",
        "memory_mib",
        "device_model__memory_mib",
        "node__pool__overcommit_factor",
    ):
        limits[pk] = DeviceLimits(
            memory_mib=int(model_memory or memory or 0),
            overcommit_pct=overcommit_pct(factor),
            label=f"{node_name}#{vendor}{index}",
        )
    return capacity_violations(intervals, limits)


# The sweep of ``_device_sweep`` as one statement (PostgreSQL): every start and end event of the
# window's allocations (clipped as there; one released the moment it started holds nothing), running
# totals per card in the same order (time, ends before starts, allocation), and the cards where some
# event leaves them over what ``_exceeded`` allows (``share_fits``: hard × F + shared × 100 ≤ 1000 × F).
_OVER_CAPACITY_SQL = f"""
WITH a AS MATERIALIZED (
    SELECT id, device_id, memory_mib, compute_milli, whole_card, isolation = %(shared)s AS shared,
           CASE WHEN %(start)s::timestamptz IS NULL THEN started_at
                ELSE GREATEST(started_at, %(start)s::timestamptz) END AS lo,
           CASE WHEN %(end)s::timestamptz IS NULL THEN released_at
                ELSE LEAST(COALESCE(released_at, %(end)s::timestamptz), %(end)s::timestamptz) END AS hi
    FROM scheduling_allocation
    WHERE (%(end)s::timestamptz IS NULL OR started_at < %(end)s::timestamptz)
      AND (%(start)s::timestamptz IS NULL OR released_at IS NULL OR released_at > %(start)s::timestamptz)
      AND (%(all)s OR device_id = ANY(%(devices)s))
), ev AS (
    SELECT device_id, lo AS at, 1 AS kind, id, 1 AS sign, memory_mib, compute_milli, whole_card, shared
    FROM a WHERE hi IS NULL OR hi > lo
    UNION ALL
    SELECT device_id, hi, 0, id, -1, memory_mib, compute_milli, whole_card, shared
    FROM a WHERE hi > lo
), run AS (
    SELECT device_id,
           SUM(sign) OVER w AS active,
           SUM(sign * memory_mib) OVER w AS memory,
           SUM(CASE WHEN whole_card THEN sign ELSE 0 END) OVER w AS whole,
           SUM(CASE WHEN NOT whole_card AND shared THEN sign * compute_milli ELSE 0 END) OVER w AS shared,
           SUM(CASE WHEN NOT whole_card AND NOT shared THEN sign * compute_milli ELSE 0 END) OVER w AS hard
    FROM ev
    WINDOW w AS (PARTITION BY device_id ORDER BY at, kind, id ROWS UNBOUNDED PRECEDING)
), limits AS (
    SELECT d.id, COALESCE(NULLIF(m.memory_mib, 0), NULLIF(d.memory_mib, 0), 0) AS memory_mib,
           FLOOR(COALESCE(NULLIF(p.overcommit_factor, 0), 1) * 100) AS factor  -- engine.share.overcommit_pct
    FROM inventory_device d
    JOIN inventory_node n ON n.id = d.node_id
    LEFT JOIN catalog_devicemodel m ON m.id = d.device_model_id
    LEFT JOIN inventory_pool p ON p.id = n.pool_id
)
SELECT DISTINCT r.device_id
FROM run r LEFT JOIN limits l ON l.id = r.device_id
WHERE (r.whole > 0 AND r.active > 1)
   OR (COALESCE(l.memory_mib, 0) > 0 AND r.memory > l.memory_mib)
   OR r.hard * COALESCE(l.factor, 100) + r.shared * 100 > {WHOLE} * COALESCE(l.factor, 100)
ORDER BY 1
"""  # noqa: S608 - a constant fragment


def _devices_over_capacity(
    *, start: datetime | None, end: datetime | None, device_ids: list[int] | None
) -> list[int]:
    """The cards whose allocations overlapping ``[start, end)`` go over their capacity at some instant
    (the sweep in SQL, ``_OVER_CAPACITY_SQL``), in id order."""
    from django.db import connection, transaction

    params = {
        "start": start,
        "end": end,
        "shared": SHARED,
        "all": device_ids is None,
        "devices": device_ids or [],
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = '256MB'")  # the month's events sort in memory
        cursor.execute(_OVER_CAPACITY_SQL, params)
        found = [row[0] for row in cursor.fetchall()]
        cursor.execute("RESET work_mem")
    return found


def _clip_end(released: datetime | None, end: datetime | None) -> datetime | None:
    if end is None:
        return released
    if released is None:
        return end
    return min(released, end)


# --------------------------------------------------------------------------------------------------
# Compute units per project over time: never above what quota admission allowed.
#
# Admission (apps.quotas.admission) lets a limited project hold at most its guarantee plus its
# borrowing limit, summed over its quota rows, at any instant. The same half-open sweep replays a
# project's allocations (``compute_units`` each) and reports its peak and every stretch above that
# ceiling. A backdated ``started_at`` (stamped before the admission's lock waits) shows up here as an
# overlap with the allocation whose release the admission saw.


@dataclass(frozen=True)
class CuInterval:
    """One allocation's compute units over ``[start, end)``; ``end`` None = still active."""

    allocation_id: int
    key: int  # what the ceiling applies to: a project id for project_cu_* below
    start: datetime
    end: datetime | None
    compute_units: Decimal


@dataclass
class CuPeak:
    key: int
    peak_cu: Decimal = Decimal(0)
    at: datetime | None = None  # the first instant the peak was reached
    allocations: list[int] = field(default_factory=list)  # active at that instant


@dataclass
class CuOverrun:
    key: int
    start: datetime
    end: datetime | None  # back within the ceiling; None = still over
    limit_cu: Decimal
    peak_cu: Decimal
    allocations: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "from": self.start.isoformat(),
            "until": self.end.isoformat() if self.end else None,
            "limit_cu": str(self.limit_cu),
            "peak_cu": str(self.peak_cu),
            "allocations": self.allocations,
        }


def _cu_events(intervals: list[CuInterval]) -> list[tuple]:
    events = []
    for interval in intervals:
        if interval.end is not None and interval.end <= interval.start:
            continue
        events.append((interval.start, 1, interval.allocation_id, interval))
        if interval.end is not None:
            events.append((interval.end, 0, interval.allocation_id, interval))
    events.sort(key=lambda e: (e[0], e[1], e[2]))  # ends before starts at the same instant
    return events


def _by_key(intervals: Iterable[CuInterval]) -> dict[int, list[CuInterval]]:
    grouped: dict[int, list[CuInterval]] = defaultdict(list)
    for interval in intervals:
        grouped[interval.key].append(interval)
    return grouped


def cu_peaks(intervals: Iterable[CuInterval]) -> dict[int, CuPeak]:
    """The highest sum of compute units held at one instant, per key (pure; O(n log n))."""
    peaks: dict[int, CuPeak] = {}
    for key, group in _by_key(intervals).items():
        peak = peaks[key] = CuPeak(key=key)
        total = Decimal(0)
        active: set[int] = set()
        for moment, kind, pk, interval in _cu_events(group):
            if kind:
                total += interval.compute_units
                active.add(pk)
                if total > peak.peak_cu:
                    peak.peak_cu, peak.at, peak.allocations = total, moment, sorted(active)
            else:
                total -= interval.compute_units
                active.discard(pk)
    return peaks


def cu_overruns(intervals: Iterable[CuInterval], limits: Mapping[int, Decimal]) -> list[CuOverrun]:
    """Every stretch during which a key held more compute units than ``limits[key]``, by key then
    time. Keys without a limit (unlimited projects) are not checked."""
    found: list[CuOverrun] = []
    grouped = _by_key(intervals)
    for key in sorted(grouped):
        if key not in limits:
            continue
        limit = Decimal(limits[key])
        total = Decimal(0)
        active: set[int] = set()
        current: CuOverrun | None = None
        for moment, kind, pk, interval in _cu_events(grouped[key]):
            if kind:
                total += interval.compute_units
                active.add(pk)
            else:
                total -= interval.compute_units
                active.discard(pk)
            if total > limit:
                if current is None:
                    current = CuOverrun(key=key, start=moment, end=None, limit_cu=limit, peak_cu=total)
                    current.allocations = sorted(active)
                elif kind:
                    current.allocations.append(pk)
                current.peak_cu = max(current.peak_cu, total)
            elif current is not None:
                current.end = moment
                found.append(current)
                current = None
        if current is not None:
            found.append(current)
    return found


def project_cu_intervals(*, start: datetime | None = None, end: datetime | None = None) -> list[CuInterval]:
    """The stored allocations overlapping ``[start, end)`` as compute-unit intervals keyed by project,
    clipped to the window."""
    from django.db.models import Q

    from apps.jobs.models import Allocation

    rows = Allocation.objects.order_by()
    if end is not None:
        rows = rows.filter(started_at__lt=end)
    if start is not None:
        rows = rows.filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
    return [
        CuInterval(
            allocation_id=pk,
            key=project_id,
            start=max(began, start) if start is not None else began,
            end=_clip_end(released, end),
            compute_units=cu,
        )
        for pk, project_id, began, released, cu in rows.values_list(
            "pk", "project_id", "started_at", "released_at", "compute_units"
        ).iterator(chunk_size=5000)
    ]


def project_cu_limits() -> dict[int, Decimal]:
    """Per limited project, the most compute units admission lets it hold at once: the sum of its
    quota rows' guarantee and borrowing limit. Projects without quota rows are unlimited (absent)."""
    from django.db.models import F, Sum

    from apps.quotas.models import Quota

    return {
        project_id: total
        for project_id, total in Quota.objects.filter(project__isnull=False)
        .values_list("project_id")
        .annotate(total=Sum(F("guaranteed_cu") + F("borrowing_limit_cu")))
        .order_by("project_id")
    }


def project_cu_overruns(*, start: datetime | None = None, end: datetime | None = None) -> list[CuOverrun]:
    """Every stretch a limited project held more compute units than its quotas admit (stored rows)."""
    return cu_overruns(project_cu_intervals(start=start, end=end), project_cu_limits())
