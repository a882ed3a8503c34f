"""Rollout beat tasks: evaluate soaking gray batches and autoscaling policies. Thin: one service each."""

from celery import shared_task

from apps.core import task_names
from apps.rollout.services import autoscale_run, batches_evaluate
from worker import time_limits


@shared_task(name=task_names.ROLLOUT_EVALUATE, **time_limits.MEDIUM, acks_late=True, ignore_result=True)
def rollout_evaluate_task() -> dict[str, int]:
    """Every 5 minutes: compute the soak result of every soaking batch (fail / pass it when decided)."""
    return batches_evaluate(actor="worker")


@shared_task(name=task_names.AUTOSCALE, **time_limits.MEDIUM, ignore_result=True)
def autoscale_task() -> dict[str, int]:
    """Every minute: evaluate every enabled autoscaling policy (a change scales the service)."""
    return autoscale_run(actor="autoscaler")
