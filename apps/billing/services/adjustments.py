"""Adjustments: credits and charges that land in the next open month, printed on its bill."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.db import transaction

from apps.accounts.models import Project
from apps.billing.models import (
    CU_HOURS_QUANTUM,
    MONEY_QUANTUM,
    Adjustment,
    Bill,
    BillingPeriod,
)
from apps.billing.services.months import current_month, default_currency, next_month
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import ValidationFailed
from apps.core.validation import validate_and_save


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
    validate_and_save(adjustment, what="adjustment")
    change_record_create(
        actor=actor,
        action="billing.adjustment_create",
        obj=adjustment,
        after=snapshot(adjustment, ["project", "month", "amount", "reason", "corrects_bill"]),
    )
    return adjustment
