"""Billing's calendar and money helpers: the platform time zone, months and hours, the billing
settings' defaults, and cents allocated by the largest remainder method."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.models import (
    HOURS_QUANTUM,
    MONEY_QUANTUM,
    IdlePolicy,
    UsageBasis,
)
from apps.core.conf import suanchi_setting
from apps.core.errors import ValidationFailed


def platform_tz() -> ZoneInfo:
    return ZoneInfo(suanchi_setting("BILLING_TIME_ZONE", None) or settings.TIME_ZONE)


def default_currency() -> str:
    return suanchi_setting("BILLING_CURRENCY", None) or "CNY"


def default_idle_policy() -> str:
    return suanchi_setting("BILLING_IDLE_POLICY", None) or str(IdlePolicy.NONE)


def default_usage_basis() -> str:
    return suanchi_setting("BILLING_USAGE_BASIS", None) or str(UsageBasis.ALLOCATED)


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
