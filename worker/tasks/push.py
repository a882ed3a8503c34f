"""Push tasks: apply a job's outbox actions to its cluster (after commit, and periodically)."""

import logging

from celery import shared_task
from django.db import OperationalError

from apps.scheduling.push import push_due_job_ids, push_job_run

logger = logging.getLogger(__name__)
PENDING_BATCH = 50


@shared_task(
    name="worker.tasks.push.push_job_task",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError,),
    max_retries=3,
    retry_backoff=True,
    retry_backoff_max=60,
    retry_jitter=True,
)
def push_job_task(job_id: int) -> dict:
    """Apply one job's pending push actions. Backend errors are handled (and recorded) by the service;
    only an unexpected database outage retries the task."""
    return push_job_run(job_id=job_id, actor="worker")


@shared_task(name="worker.tasks.push.push_pending_task", acks_late=True, ignore_result=True)
def push_pending_task(limit: int = PENDING_BATCH) -> dict:
    """Catch up: push every job with a due pending action (retries, or an enqueue the broker lost)."""
    done = []
    for job_id in push_due_job_ids(limit=limit):
        try:
            push_job_run(job_id=job_id, actor="worker")
            done.append(job_id)
        except Exception:  # noqa: BLE001 - one job's failure must not stop the others
            logger.exception("push of job %s failed", job_id)
    return {"pushed": done}
