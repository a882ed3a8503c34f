import logging

from celery import shared_task
from django.core.cache import cache

from apps.scheduling.services import scheduling_cycle_run

logger = logging.getLogger(__name__)
CYCLE_LOCK = "suanchi:scheduling-cycle"


@shared_task(name="worker.tasks.scheduling.scheduling_cycle_task", acks_late=True, ignore_result=True)
def scheduling_cycle_task() -> dict:
    """One scheduling cycle. Concurrent cycles are safe (row locks); the lock only saves wasted work."""
    if not cache.add(CYCLE_LOCK, 1, timeout=120):
        return {"skipped": "another cycle is running"}
    try:
        return scheduling_cycle_run(actor="scheduler").as_dict()
    finally:
        cache.delete(CYCLE_LOCK)


def request_cycle() -> None:
    """Ask for a cycle soon (after the submitting transaction commits). Never fails the caller:
    if the broker is down the beat schedule runs the next cycle anyway."""
    try:
        scheduling_cycle_task.apply_async(queue="scheduler")
    except Exception:  # noqa: BLE001 - the broker may be down; beat will catch up
        logger.warning(
            "could not enqueue a scheduling cycle; the periodic cycle will pick the job up", exc_info=True
        )
