"""Push tasks: apply a job's outbox actions to its cluster (after commit, and periodically)."""

from celery import shared_task
from django.db import OperationalError

from apps.clusters.health import clusters_in_backoff
from apps.clusters.models import ClusterLoop
from apps.clusters.pusher import PushSession, push_due_clusters
from apps.core import task_names
from apps.scheduling.push import push_cluster_run, push_pending_run, push_stream_run
from worker import time_limits

PENDING_BATCH = 50
# The beat period of "push-pending" (worker/celery.py): a cluster's message not started within one
# period is dropped, the next period sends a fresh one.
PUSH_PERIOD_S = 10.0
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


@shared_task(name=task_names.PUSH_STREAM, **time_limits.MEDIUM, **PUSH_TASK_OPTIONS)
def push_stream_task(stream: str) -> dict:
    """Apply one stream's pending push actions (a job's objects, or one node / quota object)."""
    return push_stream_run(stream=stream, actor="worker")


@shared_task(name=task_names.PUSH_STREAMS, **time_limits.MEDIUM, **PUSH_TASK_OPTIONS)
def push_streams_task(streams: list[str]) -> dict:
    """Apply the pending actions of several streams (one message per scheduling batch), one client
    per cluster. A cluster backing off after failures is not called, and one that does not answer is
    called once: their actions wait for that cluster's own push (``push_cluster_task``)."""
    totals: dict = {}
    session = PushSession(skip=clusters_in_backoff(loop=ClusterLoop.Loop.PUSH))
    try:
        for stream in streams:
            for key, value in (push_stream_run(stream=stream, actor="worker", session=session) or {}).items():
                if isinstance(value, int):
                    totals[key] = totals.get(key, 0) + value
    finally:
        session.close()
    return totals


@shared_task(name=task_names.PUSH_PENDING, **time_limits.MEDIUM, acks_late=True, ignore_result=True)
def push_pending_task(limit: int = PENDING_BATCH) -> dict:
    """Catch up in one task: push every stream with a due pending action, all clusters (on demand;
    beat runs ``push_clusters_task``)."""
    return push_pending_run(actor="worker", limit=limit)


@shared_task(name=task_names.PUSH_CLUSTERS, **time_limits.SHORT, ignore_result=True)
def push_clusters_task() -> dict:
    """Beat: the catch-up (retries that are due, enqueues the broker lost), one ``push_cluster_task``
    per cluster with a due action, so a cluster that does not answer delays its own pushes only.
    A cluster backing off after failures is not sent before its next try is due."""
    due, waiting = push_due_clusters()
    for cluster_id in due:
        push_cluster_task.apply_async(args=[cluster_id], expires=PUSH_PERIOD_S)
    return {"sent": due, "backing_off": waiting}


@shared_task(name=task_names.PUSH_CLUSTER, **time_limits.MEDIUM, **PUSH_TASK_OPTIONS)
def push_cluster_task(cluster_id: int, limit: int = PENDING_BATCH) -> dict:
    """One cluster's due streams (skipped when it is gone, backing off, or being pushed already)."""
    return push_cluster_run(cluster_id=cluster_id, actor="worker", limit=limit)
