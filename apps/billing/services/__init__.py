"""Billing writes: rate cards, metering, month close, bill finalize, adjustments — one module each.

* ``months`` — the platform time zone, months and hours, the billing settings' defaults, cents by the
  largest remainder method;
* ``rate_cards`` — rate cards and project discounts, and ``RateBook`` (what a slice costs per CU-hour);
* ``metering`` — allocations into hourly ``UsageEntry`` rows, under the ledger lock;
* ``close`` — a month's close: meter, build every project's bill, finalize, close;
* ``finalize`` — finalizing bills (and notifying their projects);
* ``adjustments`` — credits and charges booked into the next open month.

Money after a discount has one rule, ``apps.billing.pricing``. Other apps and the tests import the names
below from ``apps.billing.services``.
"""

from apps.billing.pricing import to_cents
from apps.billing.services.adjustments import adjustment_create, open_month_for_adjustment
from apps.billing.services.close import (
    BILL_PROGRESS,
    BUILDING_BILLS,
    IDLE_LINE_LABEL,
    METERING,
    MONTH_CLOSE_RUN_KIND,
    MONTH_CLOSE_TASK,
    ProgressCallback,
    month_close,
    month_close_enqueue,
    month_close_run,
    month_close_start,
    platform_first_use,
)
from apps.billing.services.finalize import _bills_finalize, bill_finalize, bill_update
from apps.billing.services.metering import (
    ENTRY_COLUMNS,
    LEDGER_LOCK,
    MeteringResult,
    ledger_lock,
    metering_run,
    metering_run_locked,
)
from apps.billing.services.months import (
    _hours,
    allocate_cents,
    current_month,
    default_currency,
    default_idle_policy,
    default_usage_basis,
    floor_hour,
    month_bounds,
    month_of,
    next_month,
    parse_month,
    platform_tz,
    previous_month,
)
from apps.billing.services.rate_cards import (
    RATE_CARD_FIELDS,
    RateBook,
    rate_card_create,
    rate_card_delete,
    rate_card_discount_set,
    rate_card_overlaps,
    rate_card_update,
)

__all__ = [
    "BILL_PROGRESS",
    "BUILDING_BILLS",
    "ENTRY_COLUMNS",
    "IDLE_LINE_LABEL",
    "LEDGER_LOCK",
    "METERING",
    "MONTH_CLOSE_RUN_KIND",
    "MONTH_CLOSE_TASK",
    "RATE_CARD_FIELDS",
    "MeteringResult",
    "ProgressCallback",
    "RateBook",
    "_bills_finalize",
    "_hours",
    "adjustment_create",
    "allocate_cents",
    "bill_finalize",
    "bill_update",
    "current_month",
    "default_currency",
    "default_idle_policy",
    "default_usage_basis",
    "floor_hour",
    "ledger_lock",
    "metering_run",
    "metering_run_locked",
    "month_bounds",
    "month_close",
    "month_close_enqueue",
    "month_close_run",
    "month_close_start",
    "month_of",
    "next_month",
    "open_month_for_adjustment",
    "parse_month",
    "platform_first_use",
    "platform_tz",
    "previous_month",
    "rate_card_create",
    "rate_card_delete",
    "rate_card_discount_set",
    "rate_card_overlaps",
    "rate_card_update",
    "to_cents",
]
