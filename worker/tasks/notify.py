"""Notification tasks: send due deliveries (outside transactions), the daily quota check, and the
evaluation of the alert rules on measurements."""

from celery import shared_task

from apps.notify.alerts import alerts_evaluate
from apps.notify.services import deliveries_send
from apps.notify.signals import quota_check


@shared_task(name="worker.tasks.notify.deliveries_send_task", acks_late=True, ignore_result=True)
def deliveries_send_task() -> dict:
    return deliveries_send()


@shared_task(name="worker.tasks.notify.quota_check_task", acks_late=True, ignore_result=True)
def quota_check_task() -> int:
    return quota_check()


@shared_task(name="worker.tasks.notify.alerts_evaluate_task", acks_late=True, ignore_result=True)
def alerts_evaluate_task() -> dict:
    return alerts_evaluate()
