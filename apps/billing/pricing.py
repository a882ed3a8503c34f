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
