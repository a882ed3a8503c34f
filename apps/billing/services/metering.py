"""Metering: allocations become ``UsageEntry`` rows, one per allocation and hourly slice.

Slices are aligned to whole hours in the platform time zone (settings.SUANCHI["BILLING_TIME_ZONE"],
Asia/Shanghai by default), so a slice never crosses a month boundary. Only finished hours are metered
(the window ends at the last full hour), so a slice, once written, is final; re-metering the same window
inserts nothing (unique (allocation, slice_start) + INSERT … ON CONFLICT DO NOTHING). Entries keep 6
decimals (``apps.billing.pricing``).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

from django.db import connection, transaction
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
from apps.telemetry.selectors import measured_cu_hours

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
        with cursor.copy(f"COPY {_LOAD_TABLE} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            f"INSERT INTO {UsageEntry._meta.db_table} ({columns}) "  # noqa: S608 - constant names
            f"SELECT {columns} FROM {_LOAD_TABLE} ORDER BY allocation_id, slice_start "
            "ON CONFLICT (allocation_id, slice_start) DO NOTHING"
        )
        inserted = cursor.rowcount
        cursor.execute(f"TRUNCATE {_LOAD_TABLE}")
    return inserted


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


def _hour_slices(lo: datetime, hi: datetime, tz: ZoneInfo):
    """(hour, slice start, slice end, hours) of every slice of [lo, hi) with time in it, cut at whole
    hours in the platform time zone ``tz``."""
    hour = floor_hour(lo)
    while hour < hi:
        nxt = (hour.astimezone(UTC) + HOUR).astimezone(tz)
        a, b = max(hour, lo), min(nxt, hi)
        hours = _hours(b - a)
        if hours > 0:
            yield hour, a, b, hours
        hour = nxt


def _slice_cu_hours(allocation_id: int, units, hours: Decimal, a: datetime, b: datetime, *, basis: str):
    """(CU-hours of one slice, the basis they count on): compute units × hours, or on the ``max`` basis
    telemetry's attributed card-busy CU-hours when they are more (None where it has no window)."""
    cu_hours = cu_hours_of(units, hours)
    if basis == UsageBasis.MAX:
        measured = measured_cu_hours(allocation_id, a, b)
        if measured is not None and measured > cu_hours:
            return Decimal(measured).quantize(CU_HOURS_QUANTUM, rounding=ROUND_HALF_UP), UsageBasis.MAX
    return cu_hours, UsageBasis.ALLOCATED


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
    closed = set(
        BillingPeriod.objects.filter(state=BillingPeriod.State.CLOSED).values_list("month", flat=True)
    )
    rates = RateBook()
    tz = platform_tz()
    rows = _allocations_overlapping(start, end)
    late_before = UsageEntry.objects.filter(late=True).count()
    late_slices = 0
    touched: set[date] = set()
    batch: list[tuple] = []
    currency_default = default_currency()
    metered_at = timezone.now()
    inserted = 0

    def flush() -> None:
        nonlocal inserted
        if batch:
            inserted += _entries_insert(batch, batch_size=batch_size)
            batch.clear()

    # Slices already in the ledger per allocation: an allocation whose slices in the window are all
    # there is skipped without building its entries (re-metering a closed month is a read).
    existing = _slices_stored(start, end)
    for pk, job_id, project_id, template_id, model_id, pool_id, units, started, released in rows.iterator(
        chunk_size=batch_size
    ):
        result.allocations += 1
        lo = max(started, start)
        hi = min(released, end) if released is not None else end
        if hi <= lo:
            continue
        # An upper bound of the slice count: equal to what is stored means nothing is missing.
        bound = -(-(hi - floor_hour(lo)) // HOUR)
        if existing.get(pk, 0) >= bound:
            result.slices += bound
            continue
        for hour, a, b, hours in _hour_slices(lo, hi, tz):
            slice_month = date(hour.year, hour.month, 1)
            billing_month = _billing_month(slice_month, closed)
            cu_hours, entry_basis = _slice_cu_hours(pk, units, hours, a, b, basis=basis)
            card, price, discount = rates.price(
                day=hour.date(),
                template_id=template_id,
                device_model_id=model_id,
                pool_id=pool_id,
                project_id=project_id,
            )
            amount = discounted_amount(cu_hours=cu_hours, price=price, discount_percent=discount)
            touched.add(billing_month)
            late = billing_month != slice_month
            late_slices += late
            batch.append(
                (
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
                    card.currency if card else currency_default,
                    amount,
                    late,
                    metered_at,
                )
            )
            result.slices += 1
            if len(batch) >= batch_size:
                flush()
    flush()
    for month in touched - closed:
        BillingPeriod.objects.get_or_create(
            month=month, defaults={"idle_policy": default_idle_policy(), "currency": default_currency()}
        )
    result.created = inserted
    if late_slices:
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
