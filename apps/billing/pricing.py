"""The one rounding rule for money after a project's discount (issue 27 §8).

The ledger's rule, the one finalized bills were built with (``apps.billing.services.close`` module doc):

* CU-hours of a slice: compute units × hours, ROUND_HALF_UP to 6 places (``CU_HOURS_QUANTUM``);
* its amount: CU-hours × price per CU-hour × (100 − discount %) / 100, ROUND_HALF_UP to 6 places
  (``ENTRY_AMOUNT_QUANTUM``) — entries keep sub-cent precision;
* any money shown or billed: the sum of such amounts, ROUND_HALF_UP to the cent (``to_cents``).

Metering (the bill lines), the submit page's cost per hour (the preview), the per-job costs and the
library's price per CU-hour all call these functions, so one hour of a job costs the same cent
everywhere. Decimal throughout, explicit quantize, never float.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from apps.billing.models import CU_HOURS_QUANTUM, ENTRY_AMOUNT_QUANTUM, MONEY_QUANTUM

HUNDRED = Decimal(100)


def to_cents(value) -> Decimal:
    """A money amount ROUND_HALF_UP to the cent."""
    return Decimal(value).quantize(MONEY_QUANTUM, rounding=ROUND_HALF_UP)


def cu_hours_of(compute_units, hours) -> Decimal:
    """CU-hours of ``compute_units`` held for ``hours``, ROUND_HALF_UP to 6 places."""
    return (Decimal(compute_units) * Decimal(hours)).quantize(CU_HOURS_QUANTUM, rounding=ROUND_HALF_UP)


def discounted_amount(*, cu_hours, price, discount_percent) -> Decimal:
    """What ``cu_hours`` cost at ``price`` per CU-hour after a ``discount_percent`` discount, ROUND_HALF_UP
    to the ledger's 6 places (round the sum of such amounts with ``to_cents``)."""
    gross = Decimal(cu_hours) * Decimal(price)
    return (gross * (HUNDRED - Decimal(discount_percent)) / HUNDRED).quantize(
        ENTRY_AMOUNT_QUANTUM, rounding=ROUND_HALF_UP
    )


# -- the same rules as SQL expressions, for metering's set-based path (issue 31 §3) -----------------
# Each is exact in PostgreSQL numeric (no division that rounds before the final step), so a slice
# metered in SQL carries the same figures as one metered by the functions above
# (tests/billing/test_metering_sql.py compares them, ties included).


def hours_sql(start: str, end: str) -> str:
    """``apps.billing.services.months._hours(end - start)`` in SQL (two timestamptz expressions):
    microseconds / 3,600,000,000 ROUND_HALF_UP to 6 places, in integer arithmetic."""
    micro = f"((EXTRACT(EPOCH FROM {end}) - EXTRACT(EPOCH FROM {start})) * 1000000)::bigint"
    return f"((({micro}) + 1800) / 3600 * 0.000001)"


def slice_hours_sql(hour: str, lo: str, hi: str) -> str:
    """``hours_sql`` of the hourly slice starting at ``hour`` clipped to [lo, hi): 1.000000 without
    arithmetic when the span covers the whole hour (nearly every slice of a month; the numeric epoch
    arithmetic per slice was a fifth of writing a month's ledger), the same figure either way."""
    end = f"{hour} + interval '1 hour'"
    clipped = hours_sql(f"GREATEST({hour}, {lo})", f"LEAST({end}, {hi})")
    return f"(CASE WHEN {lo} <= {hour} AND {hi} >= {end} THEN 1.000000 ELSE {clipped} END)"


def positive_hours_sql(start: str, end: str) -> str:
    """``hours_sql(start, end) > 0`` without its numeric arithmetic: the rounded hours are positive
    exactly when the span is at least 1,800 microseconds (half of a millionth of an hour)."""
    return f"(({end}) - ({start}) >= interval '1800 microseconds')"


def cu_hours_sql(compute_units: str, hours: str) -> str:
    """``cu_hours_of`` in SQL: PostgreSQL's round() on numeric is half away from zero (HALF_UP here,
    the figures are never negative)."""
    return f"round(({compute_units}) * ({hours}), 6)"


def discounted_amount_sql(cu_hours: str, price: str, discount_percent: str) -> str:
    """``discounted_amount`` in SQL: rounding x / 100 to 6 places is rounding x to 4 places, then / 100
    (a multiplication by 0.01, exact), so no intermediate division rounds."""
    return f"(round(({cu_hours}) * ({price}) * (100 - ({discount_percent})), 4) * 0.01)"
