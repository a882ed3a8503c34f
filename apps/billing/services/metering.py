"""Metering: allocations become ``UsageEntry`` rows, one per allocation and hourly slice.

Slices are aligned to whole hours in the platform time zone (settings.SUANCHI["BILLING_TIME_ZONE"],
Asia/Shanghai by default), so a slice never crosses a month boundary. Only finished hours are metered
(the window ends at the last full hour), so a slice, once written, is final; re-metering the same window
inserts nothing (unique (allocation, slice_start); allocations whose slices are all stored are left out
by the query that reads them; the others' rows go in with ON CONFLICT DO NOTHING, or with a plain
INSERT when none of them holds an entry of the window yet). Entries keep 6 decimals
(``apps.billing.pricing``). A run is one transaction: it writes all its entries or none.

Set-based on PostgreSQL (issue 31 §3, ``_meter_in_sql``): one statement lists the allocations still to
meter into a temporary table; prices come from ``RateBook`` once per (day, template, model, pool,
project) the window holds; on the ``max`` basis, SQL finds the few allocation-hours whose measured
figure may exceed the allocated one and telemetry computes exactly those
(``apps.telemetry.selectors.measured_cu_hours_by_hour``); then one INSERT … SELECT cuts every slice
(generate_series in the platform time zone) and writes the ledger, with the rounding rules' SQL forms
(``apps.billing.pricing``). Other databases (the SQLite demo) meter slice by slice in Python
(``_meter_in_python``), with the same results.
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
from django.db.models import Q
from django.utils import timezone

from apps.billing.models import (
    CU_HOURS_QUANTUM,
    BillingPeriod,
    UsageBasis,
    UsageEntry,
)
from apps.billing.pricing import (
    cu_hours_of,
    cu_hours_sql,
    discounted_amount,
    discounted_amount_sql,
    positive_hours_sql,
    slice_hours_sql,
)
from apps.billing.services.months import (
    _hours,
    default_currency,
    default_idle_policy,
    default_usage_basis,
    floor_hour,
    next_month,
    platform_tz,
)
from apps.billing.services.rate_cards import RateBook, hold_rate_cards
from apps.core.conf import suanchi_setting
from apps.core.errors import ValidationFailed
from apps.core.locks import try_lock
from apps.jobs.models import Allocation
from apps.telemetry.selectors import measured_cu_hours_by_hour
from apps.telemetry.windows import HOUR_S, WINDOW_S

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

_hours_of = lru_cache(maxsize=8192)(_hours)  # slices repeat few lengths (mostly one hour)


def slice_cu_hours(units, hours: Decimal, measured: Decimal | None) -> tuple[Decimal, str]:
    """(CU-hours of one slice, the basis they count on): compute units × hours, or on the ``max`` basis
    telemetry's attributed card-busy CU-hours when they are more (None: no window)."""
    cu_hours = cu_hours_of(units, hours)
    if measured is not None and measured > cu_hours:
        return Decimal(measured).quantize(CU_HOURS_QUANTUM, rounding=ROUND_HALF_UP), str(UsageBasis.MAX)
    return cu_hours, str(UsageBasis.ALLOCATED)


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


# -- slice by slice in Python (databases other than PostgreSQL) -------------------------------------


def _allocations_overlapping(start: datetime, end: datetime):
    """The allocations that held cards in [start, end), as the tuples metering reads (lazy)."""
    return (
        Allocation.objects.filter(started_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .order_by("pk")
        .values_list(
            "pk",
            "job_id",
            "project_id",
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


class _Pricer:
    """A slice's ledger row: the billing month (late data goes to the next open month), CU-hours on the
    basis (``slice_cu_hours``), price and discount (``RateBook``) and amount (``apps.billing.pricing``)."""

    def __init__(self, *, closed: set[date], metered_at: datetime) -> None:
        self.closed = closed
        self.metered_at = metered_at
        self.rates = RateBook()
        self.currency = default_currency()
        self.touched: set[date] = set()

    def entries(self, row: tuple, lo: datetime, hi: datetime, tz: ZoneInfo, measured: dict):
        """The ledger rows (ENTRY_COLUMNS order) of allocation ``row`` over [lo, hi)."""
        pk, job_id, project_id, template_id, model_id, pool_id, units = row[:7]
        for hour, a, b, hours in _hour_slices(lo, hi, tz):
            slice_month = date(hour.year, hour.month, 1)
            billing_month = _billing_month(slice_month, self.closed)
            cu_hours, entry_basis = slice_cu_hours(units, hours, measured.get((pk, hour)))
            card, price, discount = self.rates.price(
                day=hour.date(),
                template_id=template_id,
                device_model_id=model_id,
                pool_id=pool_id,
                project_id=project_id,
            )
            self.touched.add(billing_month)
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
                discounted_amount(cu_hours=cu_hours, price=price, discount_percent=discount),
                billing_month != slice_month,
                self.metered_at,
            )


def _meter_in_python(
    start, end, *, basis, tz, closed, metered_at, batch_size
) -> tuple[int, int, int, int | None, set]:
    """(allocations overlapping, slices, entries written, late ones (None: not counted), billing months
    touched), slice by slice;
    slices already stored are skipped by the unique (allocation, slice_start)."""
    pricer = _Pricer(closed=closed, metered_at=metered_at)
    before = UsageEntry.objects.count()
    overlapping = slices = 0
    rows = _allocations_overlapping(start, end).iterator(chunk_size=batch_size)
    while chunk := list(islice(rows, batch_size)):
        overlapping += len(chunk)
        todo = [(row, max(row[7], start), min(row[8], end) if row[8] is not None else end) for row in chunk]
        todo = [(row, lo, hi) for row, lo, hi in todo if hi > lo]
        measured = {}
        if basis == UsageBasis.MAX:
            measured = measured_cu_hours_by_hour(
                [(r[0], r[1], r[9], r[6], r[10], lo, hi) for r, lo, hi in todo], tz=tz.key
            )
        entries = [
            UsageEntry(**dict(zip(ENTRY_COLUMNS, entry, strict=True)))
            for row, lo, hi in todo
            for entry in pricer.entries(row, lo, hi, tz, measured)
        ]
        slices += len(entries)
        UsageEntry.objects.bulk_create(entries, ignore_conflicts=True, batch_size=batch_size)
    return overlapping, slices, UsageEntry.objects.count() - before, None, pricer.touched


# -- set-based in PostgreSQL ----------------------------------------------------------------------

_TODO_TABLE = """
DROP TABLE IF EXISTS meter_todo, meter_price, meter_max;
CREATE TEMP TABLE meter_todo (
    id bigint, job_id bigint, project_id bigint, template_id bigint, device_model_id bigint,
    pool_id bigint, compute_units numeric, device_id bigint, compute_milli integer,
    lo timestamptz, hi timestamptz, stored bigint, combo integer
) ON COMMIT DROP;
CREATE TEMP TABLE meter_price (
    combo integer, day date, rate_card_id bigint, unit_price numeric, discount_percent numeric, currency text
) ON COMMIT DROP;
CREATE TEMP TABLE meter_max (allocation_id bigint, hour timestamptz, cu_hours numeric) ON COMMIT DROP;
"""

# The allocations of [start, end) with slices still missing go into meter_todo; the statement returns
# how many allocations overlap the window, how many slices the complete ones hold, and how many slices
# the others hold already, and how many those others are. A slice count's upper bound: the local hours from the hour holding ``lo``
# to ``hi``; as many stored = complete.
_TODO_SQL = """
WITH w AS MATERIALIZED (
    SELECT a.id, a.job_id, a.project_id, j.template_id, d.device_model_id, n.pool_id,
           a.compute_units, a.device_id, a.compute_milli,
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
), todo AS (
    INSERT INTO meter_todo
    SELECT id, job_id, project_id, template_id, device_model_id, pool_id, compute_units, device_id,
           compute_milli, lo, hi, stored,
           dense_rank() OVER (ORDER BY project_id, template_id, device_model_id, pool_id)
    FROM x WHERE hi > lo AND stored < bound ORDER BY id
    RETURNING stored
)
SELECT (SELECT COUNT(*) FROM x),
       (SELECT COALESCE(SUM(bound) FILTER (WHERE hi > lo AND stored >= bound), 0) FROM x),
       (SELECT COALESCE(SUM(stored), 0) FROM todo), (SELECT COUNT(*) FROM todo)
"""

# On the max basis: the allocations with an hour whose measured CU-hours may exceed the allocated ones.
# Telemetry's figure is (busy points of the first source) × coefficient × WINDOW_S / 100 / HOUR_S,
# rounded to 6 places; the busy points of every source, negatives as 0, bound it from above, and in
# float8 the bound is off by far less than 1e-9. An hour whose bound is at most the allocated CU-hours
# + 0.25e-6 therefore rounds to at most them and bills them: only the other allocations are computed
# exactly, by telemetry's own function, in ``_measured_above``.
_CANDIDATES_SQL = f"""
SELECT DISTINCT id, job_id, device_id, compute_units, compute_milli, lo, hi FROM (
    SELECT t.id, t.job_id, t.device_id, t.compute_units, t.compute_milli, t.lo, t.hi,
           date_trunc('hour', u.window_start, %(tz)s) AS hour, SUM(GREATEST(u.busy_pct, 0)) AS busy
    FROM meter_todo t
    JOIN telemetry_jobutilization u
      ON u.job_id = t.job_id AND u.device_id = t.device_id
     AND u.window_start >= t.lo AND u.window_start < t.hi AND u.busy_pct IS NOT NULL
    WHERE t.compute_milli > 0
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
) f
WHERE f.busy * f.compute_units::float8 * 1000 / f.compute_milli * {WINDOW_S / 100 / HOUR_S!r}
      > {cu_hours_sql("f.compute_units", slice_hours_sql("f.hour", "f.lo", "f.hi"))}::float8
        + 0.00000025
"""  # noqa: S608 - constant fragments

_SLICE_HOURS = slice_hours_sql("g.hour", "t.lo", "t.hi")

# Every slice with time in it of the allocations to meter (hours cut in the platform time zone: the
# series of their whole hours, clipped), priced, into the ledger; returns (written, late, months). The
# slices are cut inline (no table of them is written and read back), and the joins run in the order
# written (join_collapse_limit = 1), each a hash on the small side: slice → allocation's price that day
# (meter_price) → billing month → measured figure (meter_max). The planner's estimates of these keys
# are poor, and a nested loop or a join of every allocation with every day's price first is a disaster.
_INSERT_SQL = f"""
WITH priced AS (
    SELECT t.*, sl.hour, sl.a, sl.b, sl.hours, sl.slice_month,
           (%(months)s::date[])[array_position(%(slice_months)s::date[], sl.slice_month)] AS month,
           p.rate_card_id, p.unit_price,
           p.discount_percent, p.currency, x.cu_hours IS NOT NULL AS measured,
           COALESCE(x.cu_hours, {cu_hours_sql("t.compute_units", "sl.hours")}) AS cu_hours
    FROM meter_todo t
    CROSS JOIN LATERAL (
        SELECT g.hour, GREATEST(g.hour, t.lo) AS a, LEAST(g.hour + interval '1 hour', t.hi) AS b,
               {_SLICE_HOURS} AS hours, (g.hour AT TIME ZONE %(tz)s)::date AS day,
               date_trunc('month', g.hour AT TIME ZONE %(tz)s)::date AS slice_month
        FROM generate_series(date_trunc('hour', t.lo, %(tz)s), t.hi, interval '1 hour') AS g(hour)
        WHERE g.hour < t.hi
    ) sl
    JOIN meter_price p ON p.combo = t.combo AND p.day = sl.day
    LEFT JOIN meter_max x ON x.allocation_id = t.id AND x.hour = sl.hour
    WHERE {positive_hours_sql("sl.a", "sl.b")}
), ins AS (
    INSERT INTO billing_usageentry ({", ".join(ENTRY_COLUMNS)})
    SELECT project_id, job_id, id, device_model_id, template_id, pool_id, month, a, b, hours,
           compute_units, CASE WHEN measured THEN %(max)s ELSE %(allocated)s END, cu_hours,
           rate_card_id, unit_price, discount_percent, currency,
           {discounted_amount_sql("cu_hours", "unit_price", "discount_percent")},
           month <> slice_month, %(now)s
    FROM priced
    ON CONFLICT (allocation_id, slice_start) DO NOTHING
    RETURNING month, late
)
SELECT COUNT(*), COUNT(*) FILTER (WHERE late), COALESCE(array_agg(DISTINCT month), '{{}}') FROM ins
"""  # noqa: S608 - constant fragments
_CONFLICT_CLAUSE = "\n    ON CONFLICT (allocation_id, slice_start) DO NOTHING"
# When none of the allocations to meter holds an entry of the window yet, no row can meet a stored one:
# a plain INSERT, without a speculative insertion (an arbiter lookup) per row. Only a run committed
# meanwhile can make it fail (unique violation); it is then retried with the clause, in a savepoint.
_INSERT_NEW_SQL = _INSERT_SQL.replace(_CONFLICT_CLAUSE, "")
# The insert's planner settings (SET LOCAL: the metering transaction's only).
_INSERT_SETTINGS = (
    "SET LOCAL enable_nestloop = off; SET LOCAL enable_mergejoin = off; SET LOCAL join_collapse_limit = 1;"
    " SET LOCAL jit = off"
)

_PRICE_KEYS_SQL = """
SELECT DISTINCT d::date, t.combo, t.template_id, t.device_model_id, t.pool_id, t.project_id
FROM meter_todo t
CROSS JOIN LATERAL generate_series(
    (t.lo AT TIME ZONE %(tz)s)::date::timestamp,
    ((t.hi - interval '1 microsecond') AT TIME ZONE %(tz)s)::date::timestamp,
    interval '1 day'
) AS d
"""


def _copy(cursor, table: str, rows) -> None:
    with cursor.copy(f"COPY {table} FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _prices(cursor, tz: ZoneInfo) -> None:
    """meter_price: ``RateBook``'s answer (card, price, discount, currency) once per (day, template,
    model, pool, project) the allocations to meter hold, keyed by (combo, day): ``combo`` numbers the
    (project, template, model, pool) of an allocation in meter_todo, one key the insert joins on."""
    cursor.execute(_PRICE_KEYS_SQL, {"tz": tz.key})
    keys = cursor.fetchall()
    book, currency = RateBook(), default_currency()
    rows = []
    for day, combo, template_id, model_id, pool_id, project_id in keys:
        card, price, discount = book.price(
            day=day, template_id=template_id, device_model_id=model_id, pool_id=pool_id, project_id=project_id
        )
        rows.append(
            (
                combo,
                day,
                card.pk if card else None,
                price,
                discount,
                card.currency if card else currency,
            )
        )
    _copy(cursor, "meter_price", rows)


# Above this many rollups per allocation to meter, the candidates are probed in the rollups' index
# (the hourly run over 72 hours); below, one hash join over the table reads them (a month at once).
PROBE_ROLLUPS_PER_ALLOCATION = 50


def _measured_above(cursor, tz: ZoneInfo, batch_size: int, todo: int) -> None:
    """meter_max: the slices (allocation, hour) billed on telemetry's figure (``slice_cu_hours``), with
    it; telemetry computes the figures of the candidate allocations only, a batch per query."""
    cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'telemetry_jobutilization'::regclass")
    rollups = cursor.fetchone()[0]
    probe = rollups > todo * PROBE_ROLLUPS_PER_ALLOCATION
    cursor.execute("SET LOCAL enable_nestloop = " + ("on" if probe else "off"))
    cursor.execute(_CANDIDATES_SQL, {"tz": tz.key})
    candidates = sorted(cursor.fetchall())
    cursor.execute("RESET enable_nestloop")
    for i in range(0, len(candidates), batch_size):
        batch = candidates[i : i + batch_size]
        measured = measured_cu_hours_by_hour(batch, tz=tz.key)
        spans = {row[0]: row for row in batch}
        rows = []
        for (pk, hour), figure in measured.items():
            units, lo, hi = spans[pk][3], spans[pk][5], spans[pk][6]
            hours = _hours_of(min(hour + HOUR, hi) - max(hour, lo))
            if hours > 0:
                cu_hours, basis = slice_cu_hours(units, hours, figure)
                if basis == UsageBasis.MAX:
                    rows.append((pk, hour, cu_hours))
        _copy(cursor, "meter_max", rows)


def _months(start: datetime, end: datetime, tz: ZoneInfo, closed: set[date]) -> tuple[list, list]:
    """(slice months of the window, the billing month each counts in)."""
    first, last = start.astimezone(tz), (end - timedelta(microseconds=1)).astimezone(tz)
    month, slice_months = date(first.year, first.month, 1), []
    while month <= date(last.year, last.month, 1):
        slice_months.append(month)
        month = next_month(month)
    return slice_months, [_billing_month(m, closed) for m in slice_months]


def _insert_entries(cursor, params: dict, *, fresh: bool) -> tuple:
    """(written, late, months) of the ledger INSERT; ``fresh``: no allocation to meter holds an entry of
    the window yet (the plain INSERT, retried with ON CONFLICT DO NOTHING if a run committed meanwhile)."""
    if fresh:
        try:
            with transaction.atomic():  # a savepoint: a unique violation undoes this statement only
                cursor.execute(_INSERT_NEW_SQL, params)
                return cursor.fetchone()
        except IntegrityError:
            logger.info("metering: entries committed meanwhile; inserting around them")
    cursor.execute(_INSERT_SQL, params)
    return cursor.fetchone()


def _meter_in_sql(
    start, end, *, basis, tz, closed, metered_at, batch_size
) -> tuple[int, int, int, int | None, set]:
    """(allocations overlapping, slices, entries written, late ones (None: not counted), billing months
    touched), set-based."""
    with connection.cursor() as cursor:
        cursor.execute(_TODO_TABLE)
        # A month's allocations, rollups and prices hash in memory (the default 4 MB spills them to disk).
        cursor.execute("SET LOCAL work_mem = '256MB'")
        cursor.execute(_TODO_SQL, {"start": start, "end": end, "tz": tz.key})
        overlapping, complete, stored, todo = cursor.fetchone()
        if not todo:  # re-metering a metered window: a read
            cursor.execute("RESET work_mem")
            return overlapping, int(complete), 0, 0, set()
        cursor.execute("ANALYZE meter_todo")
        _prices(cursor, tz)
        if basis == UsageBasis.MAX:
            _measured_above(cursor, tz, batch_size, todo)
        cursor.execute("ANALYZE meter_price; ANALYZE meter_max")
        cursor.execute(_INSERT_SETTINGS)
        slice_months, months = _months(start, end, tz, closed)
        params = {
            "tz": tz.key,
            "slice_months": slice_months,
            "months": months,
            "max": str(UsageBasis.MAX),
            "allocated": str(UsageBasis.ALLOCATED),
            "now": metered_at,
        }
        created, late, touched = _insert_entries(cursor, params, fresh=not stored)
        cursor.execute(
            "RESET enable_nestloop; RESET enable_mergejoin; RESET join_collapse_limit; RESET jit; RESET work_mem"
        )
    return overlapping, int(complete) + int(stored) + created, created, late, set(touched)


def metering_run(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    actor=None,
    basis: str | None = None,
    batch_size: int = 5000,
    now: datetime | None = None,
) -> MeteringResult:
    """Meter every allocation overlapping [start, end) into hourly ledger entries, in one transaction.

    ``end`` is capped at the last full hour (never meters time still running); ``start`` defaults to
    ``end`` − settings.SUANCHI["BILLING_METERING_LOOKBACK_HOURS"] (72). Idempotent. A slice whose
    month is already closed is booked into the next open month (late data)."""
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
    meter = _meter_in_sql if connection.vendor == "postgresql" else _meter_in_python
    with transaction.atomic():
        hold_rate_cards()  # before any price is read: no card is deleted under the entries
        closed = set(
            BillingPeriod.objects.filter(state=BillingPeriod.State.CLOSED).values_list("month", flat=True)
        )
        late_before = UsageEntry.objects.filter(late=True).count() if meter is _meter_in_python else 0
        result.allocations, result.slices, result.created, late, touched = meter(
            start,
            end,
            basis=basis,
            tz=platform_tz(),
            closed=closed,
            metered_at=timezone.now(),
            batch_size=batch_size,
        )
        _ensure_periods(touched - closed)
        if late is None and result.created:
            late = UsageEntry.objects.filter(late=True).count() - late_before
        result.late = late or 0
    if result.created:
        logger.info("metering %s", result.as_dict())
    return result


def _ensure_periods(months: set[date]) -> None:
    for month in sorted(months):
        BillingPeriod.objects.get_or_create(
            month=month, defaults={"idle_policy": default_idle_policy(), "currency": default_currency()}
        )


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
