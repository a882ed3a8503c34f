"""Notification tasks: send due deliveries (outside transactions), the daily quota check, and the
evaluation of the alert rules on measurements."""

from celery import shared_task

from apps.core import task_names
from apps.notify.services import deliveries_send
from apps.quotas.notices import quota_check
from apps.telemetry.alerts import alerts_evaluate
from worker import time_limits


@shared_task(name=task_names.DELIVERIES_SEND, **time_limits.SHORT, acks_late=True, ignore_result=True)
def deliveries_send_task() -> dict:
    return deliveries_send()


@shared_task(name=task_names.QUOTA_CHECK, **time_limits.SHORT, acks_late=True, ignore_result=True)
def quota_check_task() -> int:
    return quota_check()


@shared_task(name=task_names.ALERTS_EVALUATE, **time_limits.SHORT, acks_late=True, ignore_result=True)
def alerts_evaluate_task() -> dict:
    return alerts_evaluate()
