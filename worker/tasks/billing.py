"""Billing tasks (queue "billing"): meter the open period; close a month started from the admin."""

from __future__ import annotations

from celery import shared_task

from apps.billing import services
from apps.billing.models import BillingPeriod
from apps.core import task_names
from worker import time_limits


@shared_task(name=task_names.METERING, **time_limits.LONG, acks_late=True, ignore_result=True)
def metering_task() -> dict:
    """Meter the last hours (settings.SUANCHI["BILLING_METERING_LOOKBACK_HOURS"]) up to the last full
    hour. Idempotent (one entry per allocation and slice), so acks_late and overlaps are safe."""
    result = services.metering_run_locked(actor="worker")
    if result is None:
        return {"skipped": "the ledger is busy (metering or a month close is running)"}
    return result.as_dict()


class LedgerBusy(Exception):
    """Metering holds the ledger lock; the close retries shortly."""


@shared_task(
    bind=True,
    name=task_names.MONTH_CLOSE,
    **time_limits.LONG,
    acks_late=True,
    ignore_result=True,
    autoretry_for=(LedgerBusy,),
    retry_backoff=10,
    retry_jitter=True,
    max_retries=20,
)
def month_close_task(self, period_id: int, finalize: bool = True) -> dict:
    """Finish a close that month_close_start began (the admin action). Safe to run twice."""
    period = BillingPeriod.objects.filter(pk=period_id).first()
    if period is None or period.state == BillingPeriod.State.CLOSED:
        return {"skipped": "gone or already closed"}
    with services.ledger_lock("close") as taken:
        if not taken:
            raise LedgerBusy(f"the ledger is busy; closing {period} later")
        period = services.month_close_run(period=period, actor="worker", finalize=finalize)
    return {"period": str(period), "state": period.state}
