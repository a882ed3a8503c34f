"""Metering: allocations become ``UsageEntry`` rows, one per allocation and hourly slice.

Slices are aligned to whole hours in the platform time zone (settings.SUANCHI["BILLING_TIME_ZONE"],
Asia/Shanghai by default), so a slice never crosses a month boundary. Only finished hours are metered
(the window ends at the last full hour), so a slice, once written, is final; re-metering the same window
inserts nothing (unique (allocation, slice_start); allocations whose slices are all stored are left out
by the query that reads them; the others' rows go in by COPY + INSERT … ON CONFLICT DO NOTHING). Entries
keep 6 decimals (``apps.billing.pricing``).

Set-based (issue 31 §3): one statement lists the allocations still to meter; telemetry's measured
CU-hours (the ``max`` basis) are one query per batch of allocations
(``apps.telemetry.selectors.measured_cu_hours_by_hour``); rows of allocations new to the window are
COPied straight into the ledger, in batches of 50,000.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from itertools import islice
from zoneinfo import ZoneInfo

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from apps.billing.models import (
    CU_HOURS_QUANTUM,
    BillingPeriod,
    UsageBasis,
    UsageEntry,
)
from apps.billing.pricing import cu_hours_of, discounted_amount
from apps.billing.services.months import (
    _hours,
    default_currency,
    default_idle_policy,
    default_usage_basis,
    floor_hour,
    next_month,
    platform_tz,
)
from apps.billing.services.rate_cards import RateBook
from apps.core.conf import suanchi_setting
from apps.core.errors import ValidationFailed
from apps.core.locks import try_lock
from apps.jobs.models import Allocation
from apps.telemetry.selectors import measured_cu_hours_by_hour

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
LEDGER_LOCK = "suanchi:billing-ledger"


@dataclass
class MeteringResult:
    window_start: datetime
    window_end: datetime
    allocations: int = 0
    slices: int = 0
    created: int = 0
    late: int = 0

    def as_dict(self) -> dict:
        return {
            "window_start": self.window_start.isoformat(),
            "window_end": self.window_end.isoformat(),
            "allocations": self.allocations,
            "slices": self.slices,
            "created": self.created,
            "late": self.late,
        }


def _billing_month(slice_month: date, closed: set[date]) -> date:
    month = slice_month
    while month in closed:
        month = next_month(month)
    return month


ENTRY_COLUMNS = (
    "project_id",
    "job_id",
    "allocation_id",
    "device_model_id",
    "template_id",
    "pool_id",
    "month",
    "slice_start",
    "slice_end",
    "hours",
    "compute_units",
    "basis",
    "cu_hours",
    "rate_card_id",
    "unit_price",
    "discount_percent",
    "currency",
    "amount",
    "late",
    "metered_at",
)
_LOAD_TABLE = "billing_usageentry_load"


def _copy_rows(cursor, table: str, rows: list[tuple]) -> None:
    """COPY ledger rows into ``table`` (in the caller's transaction). The transaction's commit does not
    wait for the disk (synchronous_commit off): a crash can lose only the last batches, never corrupt
    the ledger, and the next metering run writes them again (metering is idempotent)."""
    cursor.execute("SET LOCAL synchronous_commit TO OFF")
    with cursor.copy(f"COPY {table} ({', '.join(ENTRY_COLUMNS)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _entries_insert(rows: list[tuple], *, batch_size: int) -> int:
    """Insert ledger rows (tuples in ENTRY_COLUMNS order), skipping slices already there. Returns how
    many were new. PostgreSQL: COPY into a session temp table, then one INSERT … SELECT … ON CONFLICT
    DO NOTHING (the ORM's per-value preparation costs more than the database work at this volume);
    other databases: bulk_create(ignore_conflicts=True) with a count."""
    if connection.vendor != "postgresql":
        before = UsageEntry.objects.count()
        UsageEntry.objects.bulk_create(
            [UsageEntry(**dict(zip(ENTRY_COLUMNS, row, strict=True))) for row in rows],
            ignore_conflicts=True,
            batch_size=batch_size,
        )
        return UsageEntry.objects.count() - before
    columns = ", ".join(ENTRY_COLUMNS)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_LOAD_TABLE} AS "  # noqa: S608 - constant names
            f"SELECT {columns} FROM {UsageEntry._meta.db_table} WITH NO DATA"
        )
        _copy_rows(cursor, _LOAD_TABLE, rows)
        cursor.execute(
            f"INSERT INTO {UsageEntry._meta.db_table} ({columns}) "  # noqa: S608 - constant names
            f"SELECT {columns} FROM {_LOAD_TABLE} ORDER BY allocation_id, slice_start "
            "ON CONFLICT (allocation_id, slice_start) DO NOTHING"
        )
        inserted = cursor.rowcount
        cursor.execute(f"TRUNCATE {_LOAD_TABLE}")
    return inserted


def _entries_copy(rows: list[tuple], *, batch_size: int) -> int:
    """Rows of allocations with no slice of the window in the ledger yet: COPY straight into it. A
    slice that arrived meanwhile (a metering run not under the ledger lock) makes the COPY fail as a
    whole; the batch then goes the ON CONFLICT way, so re-metering stays idempotent."""
    if connection.vendor != "postgresql":
        return _entries_insert(rows, batch_size=batch_size)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _copy_rows(cursor, UsageEntry._meta.db_table, rows)
    except IntegrityError:
        return _entries_insert(rows, batch_size=batch_size)
    return len(rows)


class _EntryWriter:
    """Ledger rows buffered and written in big batches: rows of allocations new to the window by COPY,
    the others (some slices stored already) by COPY + INSERT … ON CONFLICT DO NOTHING."""

    def __init__(self, *, batch_size: int) -> None:
        self.batch_size = batch_size
        self.flush_at = max(batch_size, 50_000)
        self.fresh: list[tuple] = []
        self.rest: list[tuple] = []
        self.inserted = 0

    def add(self, row: tuple, *, fresh: bool) -> None:
        (self.fresh if fresh else self.rest).append(row)
        if len(self.fresh) + len(self.rest) >= self.flush_at:
            self.flush()

    def flush(self) -> None:
        if self.fresh:
            self.inserted += _entries_copy(self.fresh, batch_size=self.batch_size)
            self.fresh = []
        if self.rest:
            self.inserted += _entries_insert(self.rest, batch_size=self.batch_size)
            self.rest = []


def _allocations_overlapping(start: datetime, end: datetime):
    """The allocations that held cards in [start, end), as the tuples metering reads (lazy)."""
    return (
        Allocation.objects.filter(started_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .order_by("pk")
        .values_list(
            "pk",
            "job_id",
            "job__project_id",
            "job__template_id",
            "device__device_model_id",
            "node__pool_id",
            "compute_units",
            "started_at",
            "released_at",
            "device_id",
            "compute_milli",
        )
    )


def _slices_stored(start: datetime, end: datetime) -> dict[int, int]:
    """How many slices starting in [start, end) the ledger holds, per allocation."""
    return dict(
        UsageEntry.objects.filter(slice_start__gte=start, slice_start__lt=end)
        .order_by()
        .values("allocation_id")
        .annotate(n=Count("pk"))
        .values_list("allocation_id", "n")
    )


# The allocations of [start, end) with slices still missing, and one summary row (id NULL) with how
# many allocations overlap the window and how many slices the complete ones hold. A slice count's
# upper bound: the local hours from the hour holding ``lo`` to ``hi``; as many stored = complete.
_TO_METER_SQL = """
WITH w AS MATERIALIZED (
    SELECT a.id, a.job_id, j.project_id, j.template_id, d.device_model_id, n.pool_id,
           a.compute_units, a.started_at, a.released_at, a.device_id, a.compute_milli,
           GREATEST(a.started_at, %(start)s) AS lo,
           LEAST(COALESCE(a.released_at, %(end)s), %(end)s) AS hi
    FROM scheduling_allocation a
    JOIN jobs_job j ON j.id = a.job_id
    JOIN inventory_device d ON d.id = a.device_id
    JOIN inventory_node n ON n.id = a.node_id
    WHERE a.started_at < %(end)s AND (a.released_at IS NULL OR a.released_at > %(start)s)
), s AS (
    SELECT allocation_id, COUNT(*) AS n FROM billing_usageentry
    WHERE slice_start >= %(start)s AND slice_start < %(end)s GROUP BY allocation_id
), x AS MATERIALIZED (
    SELECT w.*, COALESCE(s.n, 0) AS stored,
           CEIL(EXTRACT(EPOCH FROM (w.hi - date_trunc('hour', w.lo, %(tz)s))) / 3600)::bigint AS bound
    FROM w LEFT JOIN s ON s.allocation_id = w.id
)
SELECT id, job_id, project_id, template_id, device_model_id, pool_id, compute_units, started_at,
       released_at, device_id, compute_milli, stored
FROM x WHERE hi > lo AND stored < bound
UNION ALL
SELECT NULL, COUNT(*), COALESCE(SUM(bound) FILTER (WHERE hi > lo AND stored >= bound), 0)::bigint,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM x
ORDER BY 1 NULLS FIRST
"""


def _allocations_to_meter(start: datetime, end: datetime, *, tz: ZoneInfo, batch_size: int):
    """(allocations overlapping [start, end), slices the complete ones hold, the rest as metering's
    tuples + the slices each has stored already). An allocation whose slices in the window are all
    in the ledger is left out without building its entries (re-metering a closed month is a read):
    PostgreSQL counts and filters in one statement, other databases here."""
    if connection.vendor != "postgresql":
        existing = _slices_stored(start, end)
        rows, overlapping, complete = [], 0, 0
        for row in _allocations_overlapping(start, end).iterator(chunk_size=batch_size):
            overlapping += 1
            lo, hi = max(row[7], start), min(row[8], end) if row[8] is not None else end
            bound = -(-(hi - floor_hour(lo)) // HOUR)
            if hi > lo and existing.get(row[0], 0) >= bound:
                complete += bound
            elif hi > lo:
                rows.append((*row, existing.get(row[0], 0)))
        return overlapping, complete, iter(rows)
    cursor = connection.chunked_cursor()  # server-side: a month's allocations stay in the database
    cursor.execute(_TO_METER_SQL, {"start": start, "end": end, "tz": tz.key})
    _none, overlapping, complete = cursor.fetchone()[:3]

    def rest():
        with cursor:
            while chunk := cursor.fetchmany(batch_size):
                yield from chunk

    return overlapping, int(complete), rest()


_hours_of = lru_cache(maxsize=8192)(_hours)  # slices repeat few lengths (mostly one hour)


def _hour_slices(lo: datetime, hi: datetime, tz: ZoneInfo):
    """(hour, slice start, slice end, hours) of every slice of [lo, hi) with time in it, cut at whole
    hours in the platform time zone ``tz``."""
    hour = floor_hour(lo)
    while hour < hi:
        nxt = (hour.astimezone(UTC) + HOUR).astimezone(tz)
        a, b = max(hour, lo), min(nxt, hi)
        hours = _hours_of(b - a)
        if hours > 0:
            yield hour, a, b, hours
        hour = nxt


class _Pricer:
    """A slice's ledger row: the billing month (late data goes to the next open month), CU-hours on the
    basis, price and discount (``RateBook``) and amount (``apps.billing.pricing``). The rules' results
    are memoized: a month repeats few distinct hours, prices and CU-hour figures."""

    def __init__(self, *, basis: str, closed: set[date], metered_at: datetime) -> None:
        self.basis = basis
        self.closed = closed
        self.metered_at = metered_at
        self.rates = RateBook()
        self.currency = default_currency()
        self.touched: set[date] = set()
        self.late = 0
        self._months: dict[date, date] = {}
        self._cu: dict[tuple, Decimal] = {}
        self._amounts: dict[tuple, Decimal] = {}

    def _billing_month(self, slice_month: date) -> date:
        month = self._months.get(slice_month)
        if month is None:
            month = self._months[slice_month] = _billing_month(slice_month, self.closed)
        return month

    def _cu_hours(self, units, hours: Decimal, measured: Decimal | None) -> tuple[Decimal, str]:
        """(CU-hours of one slice, the basis they count on): compute units × hours, or on the ``max``
        basis telemetry's attributed card-busy CU-hours when they are more (None: no window)."""
        key = (units, hours)
        cu_hours = self._cu.get(key)
        if cu_hours is None:
            cu_hours = self._cu[key] = cu_hours_of(units, hours)
        if measured is not None and measured > cu_hours:
            return Decimal(measured).quantize(CU_HOURS_QUANTUM, rounding=ROUND_HALF_UP), str(UsageBasis.MAX)
        return cu_hours, str(UsageBasis.ALLOCATED)

    def _amount(self, cu_hours: Decimal, price: Decimal, discount: Decimal) -> Decimal:
        key = (cu_hours, price, discount)
        amount = self._amounts.get(key)
        if amount is None:
            amount = self._amounts[key] = discounted_amount(
                cu_hours=cu_hours, price=price, discount_percent=discount
            )
        return amount

    def entries(self, row: tuple, lo: datetime, hi: datetime, tz: ZoneInfo, measured: dict):
        """The ledger rows (ENTRY_COLUMNS order) of allocation ``row`` over [lo, hi)."""
        pk, job_id, project_id, template_id, model_id, pool_id, units = row[:7]
        for hour, a, b, hours in _hour_slices(lo, hi, tz):
            slice_month = date(hour.year, hour.month, 1)
            billing_month = self._billing_month(slice_month)
            cu_hours, entry_basis = self._cu_hours(units, hours, measured.get((pk, hour)))
            card, price, discount = self.rates.price(
                day=hour.date(),
                template_id=template_id,
                device_model_id=model_id,
                pool_id=pool_id,
                project_id=project_id,
            )
            self.touched.add(billing_month)
            late = billing_month != slice_month
            self.late += late
            yield (
                project_id,
                job_id,
                pk,
                model_id,
                template_id,
                pool_id,
                billing_month,
                a,
                b,
                hours,
                units,
                entry_basis,
                cu_hours,
                card.pk if card else None,
                price,
                discount,
                card.currency if card else self.currency,
                self._amount(cu_hours, price, discount),
                late,
                self.metered_at,
            )


def _measured(todo: list[tuple], *, basis: str, tz: ZoneInfo) -> dict:
    """Telemetry's CU-hours per (allocation, hour) of a batch, in one query (the ``max`` basis only)."""
    if basis != UsageBasis.MAX or not todo:
        return {}
    return measured_cu_hours_by_hour(
        [(row[0], row[1], row[9], row[6], row[10], lo, hi) for row, lo, hi, _fresh in todo], tz=tz.key
    )


def metering_run(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    actor=None,
    basis: str | None = None,
    batch_size: int = 5000,
    now: datetime | None = None,
) -> MeteringResult:
    """Meter every allocation overlapping [start, end) into hourly ledger entries.

    ``end`` is capped at the last full hour (never meters time still running); ``start`` defaults to
    ``end`` − settings.SUANCHI["BILLING_METERING_LOOKBACK_HOURS"] (72). Idempotent. A slice whose
    month is already closed is booked into the next open month (late data).

    Set-based: allocations are read in batches of ``batch_size``; on the ``max`` basis each batch's
    telemetry is one query; entries go in by COPY (``_EntryWriter``)."""
    now = now or timezone.now()
    limit = floor_hour(now)
    end = limit if end is None else min(floor_hour(end), limit)
    lookback = int(suanchi_setting("BILLING_METERING_LOOKBACK_HOURS", 72))
    start = floor_hour(start) if start is not None else end - timedelta(hours=lookback)
    result = MeteringResult(window_start=start, window_end=end)
    if end <= start:
        return result
    basis = basis or default_usage_basis()
    if basis not in UsageBasis.values:
        raise ValidationFailed(f"Unknown usage basis {basis!r}.", details={"basis": UsageBasis.values})
    closed = set(
        BillingPeriod.objects.filter(state=BillingPeriod.State.CLOSED).values_list("month", flat=True)
    )
    pricer = _Pricer(basis=basis, closed=closed, metered_at=timezone.now())
    tz = platform_tz()
    late_before = UsageEntry.objects.filter(late=True).count()
    writer = _EntryWriter(batch_size=batch_size)
    overlapping, complete, rows = _allocations_to_meter(start, end, tz=tz, batch_size=batch_size)
    result.allocations, result.slices = overlapping, complete
    while chunk := list(islice(rows, batch_size)):
        todo = []
        for row in chunk:
            started, released = row[7], row[8]
            todo.append(
                (row, max(started, start), min(released, end) if released is not None else end, row[11] == 0)
            )
        measured = _measured(todo, basis=basis, tz=tz)
        for row, lo, hi, fresh in todo:
            for entry in pricer.entries(row, lo, hi, tz, measured):
                writer.add(entry, fresh=fresh)
                result.slices += 1
    writer.flush()
    for month in pricer.touched - closed:
        BillingPeriod.objects.get_or_create(
            month=month, defaults={"idle_policy": default_idle_policy(), "currency": default_currency()}
        )
    result.created = writer.inserted
    if pricer.late:
        result.late = UsageEntry.objects.filter(late=True).count() - late_before
    if result.created:
        logger.info("metering %s", result.as_dict())
    return result


@contextmanager
def ledger_lock(holder: str):
    """Metering and month close exclude each other (a slice metered into a month while its bills are
    being built would miss them). Yields whether the lock was taken; releases it only if so.

    The lock dies with its owner (apps.core.locks): a worker killed while metering or closing
    frees the ledger at once instead of blocking both for an hour. ``holder`` names the caller in
    the lock's session (pg_stat_activity) for whoever investigates a busy ledger."""
    with try_lock(LEDGER_LOCK, holder=holder) as taken:
        yield taken


def metering_run_locked(*, actor="worker", **kwargs) -> MeteringResult | None:
    """metering_run under the ledger lock (shared with month close); None when it is held."""
    with ledger_lock("metering") as taken:
        return metering_run(actor=actor, **kwargs) if taken else None
