"""Billing writes: rate cards, metering, month close, bill finalize, adjustments.

Metering turns allocations into ``UsageEntry`` rows, one per allocation and hourly slice. Slices are
aligned to whole hours in the platform time zone (settings.SUANCHI["BILLING_TIME_ZONE"], Asia/Shanghai
by default), so a slice never crosses a month boundary. Only finished hours are metered (the window
ends at the last full hour), so a slice, once written, is final; re-metering the same window inserts
nothing (unique (allocation, slice_start) + INSERT … ON CONFLICT DO NOTHING).

Money: entries keep 6 decimals; a bill is in cents. Its usage amount is the entries' sum rounded
half-up to the cent, and the lines of each breakdown are cent amounts allocated by the largest
remainder method (ties broken by line order), so the lines always add up to the total exactly.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Min, OuterRef, Q, Subquery, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.models import Project
from apps.billing.models import (
    CU_HOURS_QUANTUM,
    HOURS_QUANTUM,
    MONEY_QUANTUM,
    Adjustment,
    Bill,
    BillFinalized,
    BillingPeriod,
    BillLine,
    IdlePolicy,
    RateCard,
    RateCardDiscount,
    UsageBasis,
    UsageEntry,
)
from apps.billing.pricing import cu_hours_of, discounted_amount, to_cents
from apps.billing.signals import bills_finalized
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core import runs
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import Conflict, ValidationFailed
from apps.core.formatting import format_datetime
from apps.core.locks import try_lock
from apps.core.stored_text import stored
from apps.inventory.models import Device
from apps.jobs.models import Allocation, Job
from apps.quotas.selectors import guaranteed_cu_hours
from apps.scheduling.invariants import allocation_capacity_violations
from apps.telemetry.selectors import measured_cu_hours

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
LEDGER_LOCK = "suanchi:billing-ledger"
MAX_REPORTED_VIOLATIONS = 50  # a refused close lists at most this many over-allocations
RATE_CARD_FIELDS = [
    "name",
    "scope",
    "pool",
    "device_model",
    "template",
    "price_per_cu_hour",
    "currency",
    "effective_from",
    "effective_to",
    "notes",
]


# ------------------------------------------------------------------ settings and calendar


def billing_settings() -> dict:
    return getattr(settings, "SUANCHI", {})


def platform_tz() -> ZoneInfo:
    return ZoneInfo(billing_settings().get("BILLING_TIME_ZONE") or settings.TIME_ZONE)


def default_currency() -> str:
    return billing_settings().get("BILLING_CURRENCY") or "CNY"


def default_idle_policy() -> str:
    return billing_settings().get("BILLING_IDLE_POLICY") or IdlePolicy.NONE


def default_usage_basis() -> str:
    return billing_settings().get("BILLING_USAGE_BASIS") or UsageBasis.ALLOCATED


def next_month(month: date) -> date:
    return date(month.year + (month.month == 12), month.month % 12 + 1, 1)


def previous_month(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[start, end) of a billing month as aware datetimes (local midnight of the 1st)."""
    tz = platform_tz()
    start = datetime(month.year, month.month, 1, tzinfo=tz)
    nxt = next_month(month)
    return start, datetime(nxt.year, nxt.month, 1, tzinfo=tz)


def month_of(moment: datetime) -> date:
    local = moment.astimezone(platform_tz())
    return date(local.year, local.month, 1)


def current_month() -> date:
    return month_of(timezone.now())


def parse_month(text: str) -> date:
    """'YYYY-MM' → the month's first day; a precise 400 otherwise."""
    try:
        parsed = datetime.strptime((text or "").strip(), "%Y-%m")
    except ValueError:
        raise ValidationFailed(
            _("Give the month as YYYY-MM (e.g. 2026-10), not %(text)r.") % {"text": text},
            details={"month": ["format YYYY-MM"]},
        )
    return date(parsed.year, parsed.month, 1)


def floor_hour(moment: datetime) -> datetime:
    """The start of the local hour holding ``moment`` (aware, platform time zone)."""
    local = moment.astimezone(platform_tz())
    return local.replace(minute=0, second=0, microsecond=0)


def _hours(delta: timedelta) -> Decimal:
    micro = delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    return (Decimal(micro) / Decimal(3_600_000_000)).quantize(HOURS_QUANTUM, rounding=ROUND_HALF_UP)


# ------------------------------------------------------------------ money helpers


def allocate_cents(raw: Sequence[Decimal], total: Decimal) -> list[Decimal]:
    """Split ``total`` (cents) over items in proportion to ``raw`` amounts so the parts add up exactly.

    Each part is its raw value rounded down to the cent; the cents still missing go one by one to
    the largest remainders (ties: the earlier item). ``total`` is the caller's rounded sum of ``raw``
    (or any other cent amount, for proportional shares)."""
    if not raw:
        return []
    total = Decimal(total).quantize(MONEY_QUANTUM)
    raw_sum = sum(raw, Decimal(0))
    if raw_sum == 0:
        scaled = [Decimal(0)] * len(raw)
        if total:
            scaled[0] = total
        return scaled
    ideal = [Decimal(r) * total / raw_sum for r in raw]
    parts = [i.quantize(MONEY_QUANTUM, rounding=ROUND_DOWN) for i in ideal]
    missing = int(((total - sum(parts, Decimal(0))) / MONEY_QUANTUM).to_integral_value())
    step = MONEY_QUANTUM if missing >= 0 else -MONEY_QUANTUM
    order = sorted(range(len(raw)), key=lambda i: (-(ideal[i] - parts[i]) * (1 if missing >= 0 else -1), i))
    for k in range(abs(missing)):
        parts[order[k % len(order)]] += step
    return parts


# ------------------------------------------------------------------ rate cards


def _overlapping(card: RateCard):
    others = RateCard.objects.filter(
        scope=card.scope,
        pool_id=card.pool_id,
        device_model_id=card.device_model_id,
        template_id=card.template_id,
    ).exclude(pk=card.pk)
    others = others.filter(Q(effective_to__isnull=True) | Q(effective_to__gte=card.effective_from))
    if card.effective_to is not None:
        others = others.filter(effective_from__lte=card.effective_to)
    return others


def rate_card_overlaps(card: RateCard) -> RateCard | None:
    """The first card of the same scope whose dates overlap ``card``'s, or None."""
    return _overlapping(card).order_by("effective_from").first()


def _rate_card_check(card: RateCard) -> None:
    card.full_clean()
    clash = rate_card_overlaps(card)
    if clash is not None:
        until = format_datetime(clash.effective_to) if clash.effective_to else _("open-ended")
        raise Conflict(
            _(
                "Rate card %(card)r overlaps %(other)r (same scope, %(start)s – %(until)s); "
                "end the other card first or pick other dates."
            )
            % {
                "card": card.name,
                "other": clash.name,
                "start": format_datetime(clash.effective_from),
                "until": until,
            },
            details={"effective_from": [f"overlaps rate card {clash.pk}"]},
            code="rate_card_overlap",
        )


def _lock_rate_cards() -> None:
    # Overlap checks race; serialize rate-card writes (the table is tiny).
    list(RateCard.objects.select_for_update().order_by("pk").values_list("pk", flat=True))


@transaction.atomic
def rate_card_create(*, actor, **fields) -> RateCard:
    unknown = set(fields) - set(RATE_CARD_FIELDS)
    if unknown:
        raise ValidationFailed(
            _("Unknown rate card field(s): %(fields)s") % {"fields": ", ".join(sorted(unknown))}
        )
    fields.setdefault("currency", default_currency())
    _lock_rate_cards()
    card = RateCard(**fields)
    _rate_card_check(card)
    card.save()
    change_record_create(
        actor=actor, action="billing.rate_card_create", obj=card, after=snapshot(card, RATE_CARD_FIELDS)
    )
    return card


@transaction.atomic
def rate_card_update(*, card: RateCard, actor, **fields) -> RateCard:
    unknown = set(fields) - set(RATE_CARD_FIELDS)
    if unknown:
        raise ValidationFailed(
            _("Unknown rate card field(s): %(fields)s") % {"fields": ", ".join(sorted(unknown))}
        )
    _lock_rate_cards()
    card = RateCard.objects.get(pk=card.pk)
    before = snapshot(card, RATE_CARD_FIELDS)
    for name, value in fields.items():
        setattr(card, name, value)
    _rate_card_check(card)
    card.save()
    change_record_create(
        actor=actor,
        action="billing.rate_card_update",
        obj=card,
        before=before,
        after=snapshot(card, RATE_CARD_FIELDS),
    )
    return card


@transaction.atomic
def rate_card_delete(*, card: RateCard, actor) -> None:
    if UsageEntry.objects.filter(rate_card=card).exists():
        raise Conflict(
            _(
                "Rate card %(card)r has priced usage already; end it (set 'effective to') instead of deleting it."
            )
            % {"card": card.name},
            code="rate_card_in_use",
        )
    change_record_create(
        actor=actor, action="billing.rate_card_delete", obj=card, before=snapshot(card, RATE_CARD_FIELDS)
    )
    card.delete()


@transaction.atomic
def rate_card_discount_set(*, card: RateCard, project: Project, percent: Decimal, actor) -> RateCardDiscount:
    discount = RateCardDiscount.objects.filter(rate_card=card, project=project).first() or RateCardDiscount(
        rate_card=card, project=project
    )
    before = None if discount.pk is None else {"percent": str(discount.percent)}
    discount.percent = percent
    discount.full_clean()
    if not (Decimal(0) <= Decimal(percent) <= Decimal(100)):
        raise ValidationFailed(_("A discount is between 0 and 100 %."), details={"percent": ["0–100"]})
    discount.save()
    change_record_create(
        actor=actor,
        action="billing.discount_set",
        obj=discount,
        before=before,
        after={"percent": str(discount.percent), "project": project.pk, "rate_card": card.pk},
    )
    return discount


class RateBook:
    """Every rate card and discount, loaded once; answers "what does this slice cost per CU-hour"."""

    ORDER = (
        RateCard.Scope.TEMPLATE,
        RateCard.Scope.DEVICE_MODEL,
        RateCard.Scope.POOL,
        RateCard.Scope.DEFAULT,
    )

    def __init__(self) -> None:
        self.cards: dict[tuple[str, int | None], list[RateCard]] = defaultdict(list)
        for card in RateCard.objects.order_by("-effective_from"):
            key = {
                RateCard.Scope.TEMPLATE: card.template_id,
                RateCard.Scope.DEVICE_MODEL: card.device_model_id,
                RateCard.Scope.POOL: card.pool_id,
            }.get(card.scope)
            self.cards[(card.scope, key)].append(card)
        self.discounts = {(d.rate_card_id, d.project_id): d.percent for d in RateCardDiscount.objects.all()}
        self._memo: dict[tuple, tuple[RateCard | None, Decimal, Decimal]] = {}

    def _card(self, scope: str, key: int | None, day: date) -> RateCard | None:
        for card in self.cards.get((scope, key), ()):
            if card.effective_from <= day and (card.effective_to is None or day <= card.effective_to):
                return card
        return None

    def price(
        self,
        *,
        day: date,
        template_id: int | None,
        device_model_id: int | None,
        pool_id: int | None,
        project_id: int,
    ) -> tuple[RateCard | None, Decimal, Decimal]:
        """(card, price per CU-hour, discount %) in force on the day; no card → price 0."""
        memo_key = (day, template_id, device_model_id, pool_id, project_id)
        hit = self._memo.get(memo_key)
        if hit is not None:
            return hit
        card = None
        for scope, key in (
            (RateCard.Scope.TEMPLATE, template_id),
            (RateCard.Scope.DEVICE_MODEL, device_model_id),
            (RateCard.Scope.POOL, pool_id),
            (RateCard.Scope.DEFAULT, None),
        ):
            if scope != RateCard.Scope.DEFAULT and key is None:
                continue
            card = self._card(scope, key, day)
            if card is not None:
                break
        if card is None:
            result = (None, Decimal(0), Decimal(0))
        else:
            result = (card, card.price_per_cu_hour, self.discounts.get((card.pk, project_id), Decimal(0)))
        self._memo[memo_key] = result
        return result


# ------------------------------------------------------------------ metering


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
    lookback = int(billing_settings().get("BILLING_METERING_LOOKBACK_HOURS", 72))
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
    rows = (
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
    existing = dict(
        UsageEntry.objects.filter(slice_start__gte=start, slice_start__lt=end)
        .order_by()
        .values("allocation_id")
        .annotate(n=Count("pk"))
        .values_list("allocation_id", "n")
    )
    for pk, job_id, project_id, template_id, model_id, pool_id, units, started, released in rows.iterator(
        chunk_size=batch_size
    ):
        result.allocations += 1
        lo = max(started, start)
        hi = min(released, end) if released is not None else end
        hour = floor_hour(lo)
        if hi <= lo:
            continue
        # An upper bound of the slice count: equal to what is stored means nothing is missing.
        bound = -(-(hi - hour) // HOUR)
        if existing.get(pk, 0) >= bound:
            result.slices += bound
            continue
        while hour < hi:
            nxt = (hour.astimezone(UTC) + HOUR).astimezone(tz)
            a, b = max(hour, lo), min(nxt, hi)
            hours = _hours(b - a)
            if hours > 0:
                slice_month = date(hour.year, hour.month, 1)
                billing_month = _billing_month(slice_month, closed)
                cu_hours = cu_hours_of(units, hours)
                entry_basis = UsageBasis.ALLOCATED
                if basis == UsageBasis.MAX:
                    # Telemetry's attributed card-busy points; None where it has no window.
                    measured = measured_cu_hours(pk, a, b)
                    if measured is not None and measured > cu_hours:
                        cu_hours = Decimal(measured).quantize(CU_HOURS_QUANTUM, rounding=ROUND_HALF_UP)
                        entry_basis = UsageBasis.MAX
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
            hour = nxt
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


# ------------------------------------------------------------------ quota showback


def _guaranteed_showback(*, project: Project, month: date) -> Decimal | None:
    """The bill's quota showback: the project's guaranteed CU-hours in the month (apps.quotas), None
    when it has no quota."""
    value = guaranteed_cu_hours(project=project, month=month)
    return None if value is None else Decimal(value).quantize(CU_HOURS_QUANTUM)


# ------------------------------------------------------------------ month close


ProgressCallback = Callable[[BillingPeriod], None]
# The BackgroundRun kind of a month close (BillingPeriod.close_run).
MONTH_CLOSE_RUN_KIND = "billing.month_close"
# The month close's progress (a stored text, shown in the reader's language: apps.core.stored_text).
METERING = stored("metering")
BUILDING_BILLS = stored("building bills")
BILL_PROGRESS = stored("bill %(done)s/%(total)s: %(project)s")


def _period_for(month: date) -> BillingPeriod:
    period, _created = BillingPeriod.objects.get_or_create(
        month=month, defaults={"idle_policy": default_idle_policy(), "currency": default_currency()}
    )
    return period


def _ensure_ended(month: date, now: datetime | None = None) -> None:
    _start, end = month_bounds(month)
    if end > (now or timezone.now()):
        raise ValidationFailed(
            _("Month %(month)s has not ended yet (it ends %(end)s); only a past month can be closed.")
            % {"month": f"{month:%Y-%m}", "end": format_datetime(end)},
            details={"month": ["not ended"]},
            code="month_not_ended",
        )


def platform_first_use() -> datetime | None:
    """When the platform was first used: the earliest allocation, usage slice or adjustment month."""
    moments = [
        Allocation.objects.order_by().aggregate(first=Min("started_at"))["first"],
        UsageEntry.objects.order_by().aggregate(first=Min("slice_start"))["first"],
    ]
    first_adjusted = Adjustment.objects.order_by().aggregate(first=Min("month"))["first"]
    if first_adjusted is not None:
        moments.append(month_bounds(first_adjusted)[0])
    found = [moment for moment in moments if moment is not None]
    return min(found) if found else None


def _ensure_after_first_use(month: date) -> None:
    """A month that ended before anything ever ran would only make zero bills that can never be
    removed (a finalized bill is immutable): refuse it."""
    _start, end = month_bounds(month)
    first = platform_first_use()
    if first is None:
        raise ValidationFailed(
            _("Month %(month)s cannot be closed: nothing has been allocated or metered yet.")
            % {"month": f"{month:%Y-%m}"},
            details={"month": ["before the platform's first usage"]},
            code="month_before_first_use",
        )
    if end <= first:
        raise ValidationFailed(
            _("Month %(month)s cannot be closed: it ended before the platform's first usage (%(first)s).")
            % {"month": f"{month:%Y-%m}", "first": format_datetime(first)},
            details={"month": ["before the platform's first usage"], "first_use": first.isoformat()},
            code="month_before_first_use",
        )


def _ensure_capacity_kept(month: date) -> None:
    """Refuse (409) to bill a month in which some card held more than it has (DESIGN.md: no device is
    ever over-allocated); the details list every card, stretch of time, allocation and limit."""
    start, end = month_bounds(month)
    violations = allocation_capacity_violations(start=start, end=end)
    if not violations:
        return
    shown = violations[:MAX_REPORTED_VIOLATIONS]
    raise Conflict(
        _(
            "Month %(month)s cannot be finalized: %(count)s over-allocation(s) of a card, "
            "e.g. %(example)s. Correct the allocations first."
        )
        % {"month": f"{month:%Y-%m}", "count": len(violations), "example": shown[0].describe()},
        details={"violations": [v.as_dict() for v in shown], "count": len(violations)},
        code="capacity_exceeded",
    )


@transaction.atomic
def month_close_start(
    *, month: date, actor, idle_policy: str | None = None, now: datetime | None = None
) -> BillingPeriod:
    """Mark a month as closing (committed, so progress is visible). Closed months are returned as is.

    Refused before anything is written: a month not yet ended or before the platform's first usage
    (400), a month whose allocations over-book a card (409)."""
    _ensure_ended(month, now)
    _ensure_after_first_use(month)
    if idle_policy is not None and idle_policy not in IdlePolicy.values:
        raise ValidationFailed(
            f"Unknown idle-cost policy {idle_policy!r}.", details={"idle_policy": IdlePolicy.values}
        )
    period = _period_for(month)
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    if period.state == BillingPeriod.State.CLOSED:
        return period
    _ensure_capacity_kept(month)
    earlier_open = BillingPeriod.objects.filter(month__lt=month).exclude(state=BillingPeriod.State.CLOSED)
    if earlier_open.filter(state=BillingPeriod.State.CLOSING).exists():
        raise Conflict(
            _("An earlier month is being closed; wait for it to finish."), code="close_in_progress"
        )
    before = snapshot(period, ["state", "idle_policy"])
    period.state = BillingPeriod.State.CLOSING
    if idle_policy:
        period.idle_policy = idle_policy
    # A new close gets a new run; one left unfinished by a close that stopped is over.
    if period.close_run_id is not None:
        runs.run_fail(run=period.close_run, error="superseded by a new close of this month")
    period.close_run = runs.run_create(
        kind=MONTH_CLOSE_RUN_KIND,
        actor=actor,
        params={"period": period.pk, "month": period.label},
        message=METERING,
    )
    period.save()
    change_record_create(
        actor=actor,
        action="billing.month_close_start",
        obj=period,
        before=before,
        after=snapshot(period, ["state", "idle_policy"]),
    )
    return period


def _progress(
    period: BillingPeriod, *, done: int | None = None, total: int | None = None, message: str = ""
) -> None:
    """Publish the close's progress on its run (seen by the period page while a bill's own
    transaction is still open)."""
    if period.close_run is not None:
        runs.run_progress(run=period.close_run, done=done, total=total, message=message)


def _idle(period: BillingPeriod, used_by_group: dict[tuple, Decimal]) -> tuple[Decimal, Decimal]:
    """(idle CU-hours, idle cost in cents) of the month: in-service capacity minus use, at list price.

    Capacity counts each non-retired card from the later of its registration and the month start;
    its CU are the model's coefficient on the 1st (DESIGN.md "Compute units")."""
    start, end = month_bounds(period.month)
    devices = (
        Device.objects.exclude(health=Device.Health.RETIRED)
        .filter(created_at__lt=end, device_model__isnull=False)
        .values_list("device_model_id", "node__pool_id", "created_at")
    )
    capacity_hours: dict[tuple, Decimal] = defaultdict(Decimal)
    for model_id, pool_id, created in devices.iterator(chunk_size=5000):
        capacity_hours[(model_id, pool_id)] += _hours(end - max(start, created))
    if not capacity_hours:
        return Decimal(0), Decimal(0)
    coefficients = coefficients_on({m for m, _p in capacity_hours}, period.month)
    rates = RateBook()
    idle_cu = Decimal(0)
    idle_cost = Decimal(0)
    for (model_id, pool_id), hours in capacity_hours.items():
        coefficient = coefficients.get(model_id)
        if coefficient is None:
            continue
        free = coefficient * hours - used_by_group.get((model_id, pool_id), Decimal(0))
        if free <= 0:
            continue
        _card, price, _discount = rates.price(
            day=period.month, template_id=None, device_model_id=model_id, pool_id=pool_id, project_id=0
        )
        idle_cu += free
        idle_cost += free * price
    return idle_cu.quantize(CU_HOURS_QUANTUM), to_cents(idle_cost)


@dataclass
class _ProjectUsage:
    cu_hours: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)
    entries: int = 0
    resources: list[tuple] = field(default_factory=list)  # (model_id, template_id, cu_hours, amount)
    jobs: list[tuple] = field(default_factory=list)  # (job_id, cu_hours, amount)


def _usage_by_project(month: date) -> dict[int, _ProjectUsage]:
    usage: dict[int, _ProjectUsage] = defaultdict(_ProjectUsage)
    entries = UsageEntry.objects.filter(month=month).order_by()
    for row in entries.values("project_id", "device_model_id", "template_id").annotate(
        cu=Sum("cu_hours"), amount=Sum("amount"), n=Count("pk")
    ):
        item = usage[row["project_id"]]
        item.resources.append((row["device_model_id"], row["template_id"], row["cu"], row["amount"]))
        item.cu_hours += row["cu"]
        item.amount += row["amount"]
        item.entries += row["n"]
    for row in entries.values("project_id", "job_id").annotate(cu=Sum("cu_hours"), amount=Sum("amount")):
        usage[row["project_id"]].jobs.append((row["job_id"], row["cu"], row["amount"]))
    return usage


# The idle line's label (stored; the bill page and files show it in the reader's language).
IDLE_LINE_LABEL = stored("idle capacity share")


def _resource_label(model: DeviceModel | None, template: ComputeTemplate | None) -> str:
    name = model.name if model else "?"
    if template is not None:
        return f"{name} · {template.name}"
    return name


def _bill_build(
    *,
    period: BillingPeriod,
    project: Project,
    usage: _ProjectUsage,
    idle_share: Decimal,
    models: dict[int, DeviceModel],
    templates: dict[int, ComputeTemplate],
    jobs: dict[int, Job],
) -> Bill:
    usage_amount = to_cents(usage.amount)
    adjustments = list(
        Adjustment.objects.filter(project=project, month=period.month).order_by("created_at", "pk")
    )
    adjustments_amount = sum((a.amount for a in adjustments), Decimal(0))
    bill = Bill.objects.create(
        project=project,
        period=period,
        month=period.month,
        currency=period.currency,
        used_cu_hours=usage.cu_hours.quantize(CU_HOURS_QUANTUM),
        guaranteed_cu_hours=_guaranteed_showback(project=project, month=period.month),
        entry_count=usage.entries,
        usage_amount=usage_amount,
        adjustments_amount=adjustments_amount,
        idle_share_amount=idle_share,
        total=usage_amount + adjustments_amount + idle_share,
    )
    lines: list[BillLine] = []
    resources = sorted(
        usage.resources,
        key=lambda r: (_resource_label(models.get(r[0]), templates.get(r[1])), r[0] or 0, r[1] or 0),
    )
    for position, (row, cents) in enumerate(
        zip(resources, allocate_cents([r[3] for r in resources], usage_amount), strict=True)
    ):
        model_id, template_id, cu, _raw = row
        lines.append(
            BillLine(
                bill=bill,
                group=BillLine.Group.RESOURCE,
                position=position,
                label=_resource_label(models.get(model_id), templates.get(template_id))[:300],
                device_model_id=model_id,
                template_id=template_id,
                cu_hours=cu.quantize(CU_HOURS_QUANTUM),
                amount=cents,
            )
        )
    job_rows = sorted(usage.jobs, key=lambda r: (jobs[r[0]].name if r[0] in jobs else "", r[0]))
    for position, (row, cents) in enumerate(
        zip(job_rows, allocate_cents([r[2] for r in job_rows], usage_amount), strict=True)
    ):
        job_id, cu, _raw = row
        job = jobs.get(job_id)
        lines.append(
            BillLine(
                bill=bill,
                group=BillLine.Group.JOB,
                position=position,
                label=(f"{job.name} (#{job_id})" if job else f"#{job_id}")[:300],
                job_id=job_id,
                cu_hours=cu.quantize(CU_HOURS_QUANTUM),
                amount=cents,
            )
        )
    for position, adjustment in enumerate(adjustments):
        lines.append(
            BillLine(
                bill=bill,
                group=BillLine.Group.ADJUSTMENT,
                position=position,
                label=adjustment.reason[:300],
                cu_hours=adjustment.cu_hours,
                amount=adjustment.amount,
            )
        )
    if idle_share:
        lines.append(
            BillLine(
                bill=bill,
                group=BillLine.Group.IDLE,
                position=0,
                label=IDLE_LINE_LABEL,
                amount=idle_share,
            )
        )
    BillLine.objects.bulk_create(lines)
    return bill


def month_close_run(
    *, period: BillingPeriod, actor, finalize: bool = True, progress: ProgressCallback | None = None
) -> BillingPeriod:
    """Meter the month, build every project's bill (one transaction each, so progress shows), then
    finalize them all and close the month in one transaction. A closed month is returned untouched."""
    period = BillingPeriod.objects.get(pk=period.pk)
    if period.state == BillingPeriod.State.CLOSED:
        return period
    if period.state != BillingPeriod.State.CLOSING:
        raise Conflict(
            _("Month %(month)s is %(state)s, not closing; start the close first.")
            % {"month": period, "state": period.state},
            code="not_closing",
        )
    if period.close_run is None:  # a month marked closing before closes had runs
        period.close_run = runs.run_create(
            kind=MONTH_CLOSE_RUN_KIND, actor=actor, params={"period": period.pk, "month": period.label}
        )
        BillingPeriod.objects.filter(pk=period.pk).update(close_run=period.close_run)
    # Resume: a run left running by a worker that died is taken again (the close is idempotent).
    period.close_run = (
        runs.run_start(run_id=period.close_run.pk, kind=MONTH_CLOSE_RUN_KIND, resume=True) or period.close_run
    )
    try:
        return _month_close_build(period=period, actor=actor, finalize=finalize, progress=progress)
    except Exception as exc:
        # The month stays closing (close_month resumes it); its run says why it stopped.
        runs.run_fail(
            run=period.close_run, error=getattr(exc, "message", None) or str(exc) or type(exc).__name__
        )
        raise


def _month_close_build(
    *, period: BillingPeriod, actor, finalize: bool, progress: ProgressCallback | None
) -> BillingPeriod:
    start, end = month_bounds(period.month)
    _progress(period, message=METERING)
    metering_run(start=start, end=end, actor=actor)
    with transaction.atomic():
        # Drafts from an earlier run are rebuilt (a finalized bill is never touched).
        BillLine.objects.filter(bill__period=period, bill__state=Bill.State.DRAFT).delete()
        Bill.objects.filter(period=period, state=Bill.State.DRAFT).delete()
    usage = _usage_by_project(period.month)
    used_by_group: dict[tuple, Decimal] = defaultdict(Decimal)
    for row in (
        UsageEntry.objects.filter(month=period.month)
        .order_by()
        .values("device_model_id", "pool_id")
        .annotate(cu=Sum("cu_hours"))
    ):
        used_by_group[(row["device_model_id"], row["pool_id"])] += row["cu"]
    idle_cu, idle_cost = _idle(period, used_by_group)
    already = set(Bill.objects.filter(period=period).values_list("project_id", flat=True))
    adjusted = set(Adjustment.objects.filter(month=period.month).values_list("project_id", flat=True))
    projects = list(
        Project.objects.filter(Q(is_active=True) | Q(pk__in=set(usage) | adjusted))
        .exclude(pk__in=already)
        .order_by("slug")
    )
    shares = {p.pk: Decimal(0) for p in projects}
    platform_cost = Decimal(0)
    if period.idle_policy == IdlePolicy.SPREAD and idle_cost:
        users = [p for p in projects if usage.get(p.pk) and usage[p.pk].cu_hours > 0]
        if users:
            for p, cents in zip(
                users, allocate_cents([usage[p.pk].cu_hours for p in users], idle_cost), strict=True
            ):
                shares[p.pk] = cents
        else:
            platform_cost = idle_cost
    elif period.idle_policy == IdlePolicy.PLATFORM:
        platform_cost = idle_cost
    model_ids = {r[0] for u in usage.values() for r in u.resources if r[0]}
    template_ids = {r[1] for u in usage.values() for r in u.resources if r[1]}
    job_ids = {r[0] for u in usage.values() for r in u.jobs}
    models = DeviceModel.objects.in_bulk(model_ids)
    templates = ComputeTemplate.objects.in_bulk(template_ids)
    jobs = Job.objects.only("pk", "name").in_bulk(job_ids)
    _progress(period, done=0, total=len(projects), message=BUILDING_BILLS)
    if progress:
        progress(period)
    for index, project in enumerate(projects, start=1):
        with transaction.atomic():
            _bill_build(
                period=period,
                project=project,
                usage=usage.get(project.pk, _ProjectUsage()),
                idle_share=shares[project.pk],
                models=models,
                templates=templates,
                jobs=jobs,
            )
            _progress(
                period,
                done=index,
                message=BILL_PROGRESS % {"done": index, "total": len(projects), "project": project.slug},
            )
        if progress:
            progress(period)
    with transaction.atomic():
        locked = BillingPeriod.objects.select_for_update().get(pk=period.pk)
        before = snapshot(locked, ["state"])
        locked.idle_cu_hours = idle_cu
        locked.idle_cost = idle_cost
        locked.platform_cost = platform_cost
        if finalize:
            _ensure_capacity_kept(locked.month)
            now = timezone.now()
            _bills_finalize(Bill.objects.filter(period=locked, state=Bill.State.DRAFT), now=now)
            locked.state = BillingPeriod.State.CLOSED
            locked.closed_at = now
            locked.closed_by = actor_fields(actor)["actor_label"]
        else:
            locked.state = BillingPeriod.State.DRAFT
        locked.save()
        after = {
            "state": locked.state,
            "bills": locked.bills.count(),
            "idle_cost": str(idle_cost),
            "platform_cost": str(platform_cost),
        }
        change_record_create(
            actor=actor, action="billing.month_close", obj=locked, before=before, after=after
        )
        if period.close_run is not None:
            runs.run_finish(run=period.close_run, result=after, message="")
            locked.close_run = period.close_run
    if progress:
        progress(locked)
    return locked


def month_close(
    *,
    month: date,
    actor,
    finalize: bool = True,
    idle_policy: str | None = None,
    progress: ProgressCallback | None = None,
    now: datetime | None = None,
) -> BillingPeriod:
    """Close a month end to end (the close_month command). Closing a closed month changes nothing."""
    with ledger_lock("close") as taken:
        if not taken:
            raise Conflict(
                _("Metering or another close is running; try again in a minute."), code="ledger_busy"
            )
        period = month_close_start(month=month, actor=actor, idle_policy=idle_policy, now=now)
        if period.state == BillingPeriod.State.CLOSED:
            return period
        return month_close_run(period=period, actor=actor, finalize=finalize, progress=progress)


def _bills_finalize(bills, *, now: datetime) -> int:
    """Finalize draft bills in one statement, snapshotting the names their documents print."""
    project = Project.objects.filter(pk=OuterRef("project_id"))
    ids = list(bills.filter(state=Bill.State.DRAFT).values_list("pk", flat=True))
    done = Bill.objects.filter(pk__in=ids, state=Bill.State.DRAFT).update(
        state=Bill.State.FINALIZED,
        finalized_at=now,
        project_name=Subquery(project.values("name")[:1]),
        project_slug=Subquery(project.values("slug")[:1]),
        department_name=Subquery(project.values("department__name")[:1]),
    )
    if ids:  # layers above (notifications) hear about it; a queryset update sends no post_save
        bills_finalized.send(sender=Bill, bill_ids=ids)
    return done


@transaction.atomic
def bill_finalize(*, bill: Bill, actor) -> Bill:
    """Lock a draft bill. Finalizing a finalized bill is a 409; so is a bill of a month whose
    allocations over-book a card."""
    if Bill.objects.filter(pk=bill.pk, state=Bill.State.FINALIZED).exists():
        raise BillFinalized(f"Bill {bill} is already finalized.")
    _ensure_capacity_kept(bill.month)
    updated = _bills_finalize(Bill.objects.filter(pk=bill.pk), now=timezone.now())
    if not updated:
        raise BillFinalized(f"Bill {bill} is already finalized.")
    bill = Bill.objects.get(pk=bill.pk)
    change_record_create(
        actor=actor,
        action="billing.bill_finalize",
        obj=bill,
        before={"state": "draft"},
        after={"state": bill.state},
    )
    period = BillingPeriod.objects.select_for_update().get(pk=bill.period_id)
    if period.state == BillingPeriod.State.DRAFT and not period.bills.filter(state=Bill.State.DRAFT).exists():
        period.state = BillingPeriod.State.CLOSED
        period.closed_at = timezone.now()
        period.closed_by = actor_fields(actor)["actor_label"]
        period.save()
    return bill


def bill_update(*, bill: Bill, actor, **fields) -> Bill:
    """Bills are built by month close, not edited: a draft is rebuilt by closing again; a finalized
    bill is corrected with an adjustment. Always refuses (409) so callers get a precise message."""
    if Bill.objects.filter(pk=bill.pk, state=Bill.State.FINALIZED).exists():
        raise BillFinalized(
            _("Bill %(bill)s is finalized and cannot change; record an adjustment instead.") % {"bill": bill}
        )
    raise Conflict(
        _("Bills are computed from the ledger; close the month again to rebuild a draft."),
        code="bill_computed",
    )


# ------------------------------------------------------------------ adjustments


def open_month_for_adjustment(after: date | None = None) -> date:
    """The month an adjustment lands in: the current month, or the first month after ``after`` (the
    corrected bill's month), skipping months that are closed or being closed."""
    month = current_month() if after is None else next_month(after)
    busy = set(
        BillingPeriod.objects.filter(
            state__in=[BillingPeriod.State.CLOSED, BillingPeriod.State.CLOSING]
        ).values_list("month", flat=True)
    )
    while month in busy:
        month = next_month(month)
    return month


@transaction.atomic
def adjustment_create(
    *,
    project: Project,
    amount: Decimal,
    reason: str,
    actor,
    corrects_bill: Bill | None = None,
    cu_hours: Decimal = Decimal(0),
) -> Adjustment:
    errors: dict[str, list[str]] = {}
    try:
        amount = Decimal(amount)
    except Exception:  # noqa: BLE001 - any non-number is bad input
        errors["amount"] = ["not a number"]
    else:
        if not amount.is_finite() or amount == 0:
            errors["amount"] = ["give a non-zero amount (negative = credit)"]
        elif amount != amount.quantize(MONEY_QUANTUM):
            errors["amount"] = ["amounts are in cents: at most two decimals"]
    if not (reason or "").strip():
        errors["reason"] = ["say why (it is printed on the bill)"]
    if corrects_bill is not None and corrects_bill.project_id != project.pk:
        errors["corrects_bill"] = ["that bill belongs to another project"]
    if errors:
        raise ValidationFailed(
            "Invalid adjustment: " + "; ".join(f"{k}: {v[0]}" for k, v in errors.items()), details=errors
        )
    adjustment = Adjustment(
        project=project,
        month=open_month_for_adjustment(corrects_bill.month if corrects_bill else None),
        amount=amount,
        cu_hours=Decimal(cu_hours or 0).quantize(CU_HOURS_QUANTUM),
        currency=corrects_bill.currency if corrects_bill else default_currency(),
        reason=reason.strip(),
        corrects_bill=corrects_bill,
        **{k: v for k, v in actor_fields(actor).items()},
    )
    adjustment.full_clean()
    adjustment.save()
    change_record_create(
        actor=actor,
        action="billing.adjustment_create",
        obj=adjustment,
        after=snapshot(adjustment, ["project", "month", "amount", "reason", "corrects_bill"]),
    )
    return adjustment


# The billing worker's task that finishes a close, sent by name (worker/ sits above every app).
MONTH_CLOSE_TASK = "worker.tasks.billing.month_close_task"


def month_close_enqueue(*, period: BillingPeriod, finalize: bool = True) -> None:
    """After commit, hand the rest of a started close to the billing worker. Never fails the caller:
    when the broker is down the period stays "closing" and ``close_month`` resumes it."""

    # With the broker down the run stays queued and says so; close_month resumes the close.
    runs.run_enqueue(run=period.close_run, task=MONTH_CLOSE_TASK, args=[period.pk, finalize], queue="billing")
