"""Push tasks: apply a job's outbox actions to its cluster (after commit, and periodically)."""

from celery import shared_task
from django.db import OperationalError

from apps.clusters.pusher import push_pending_run, push_stream_run

PENDING_BATCH = 50
# Backend errors are handled (and recorded) by the push service; only an unexpected database outage
# retries a task. acks_late: a worker that dies mid-push leaves the message for another one.
PUSH_TASK_OPTIONS = {
    "acks_late": True,
    "ignore_result": True,
    "autoretry_for": (OperationalError,),
    "max_retries": 3,
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "retry_jitter": True,
}


@shared_task(name="worker.tasks.push.push_stream_task", **PUSH_TASK_OPTIONS)
def push_stream_task(stream: str) -> dict:
    """Apply one stream's pending push actions (a job's objects, or one node / quota object)."""
    return push_stream_run(stream=stream, actor="worker")


@shared_task(name="worker.tasks.push.push_streams_task", **PUSH_TASK_OPTIONS)
def push_streams_task(streams: list[str]) -> dict:
    """Apply the pending actions of several streams (one message per scheduling batch)."""
    totals: dict = {}
    for stream in streams:
        for key, value in (push_stream_run(stream=stream, actor="worker") or {}).items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return totals


@shared_task(name="worker.tasks.push.push_pending_task", acks_late=True, ignore_result=True)
def push_pending_task(limit: int = PENDING_BATCH) -> dict:
    """Catch up: push every stream with a due pending action (retries, or an enqueue the broker lost)."""
    return push_pending_run(actor="worker", limit=limit)
