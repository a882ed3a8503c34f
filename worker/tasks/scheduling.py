import logging

from celery import shared_task

from apps.core import task_names
from apps.core.locks import try_lock
from apps.scheduling.services import scheduling_cycle_run
from worker import time_limits

logger = logging.getLogger(__name__)
CYCLE_LOCK = "suanchi:scheduling-cycle"


@shared_task(name=task_names.SCHEDULING_CYCLE, **time_limits.MEDIUM, acks_late=True, ignore_result=True)
def scheduling_cycle_task() -> dict:
    """One scheduling cycle. Concurrent cycles are safe (row locks); the lock only saves wasted work.
    It dies with its owner (apps.core.locks): a worker killed mid-cycle holds up the next cycle for
    seconds, not for a time-to-live."""
    with try_lock(CYCLE_LOCK, holder="scheduling-cycle") as taken:
        if not taken:
            return {"skipped": "another cycle is running"}
        return scheduling_cycle_run(actor="scheduler").as_dict()
