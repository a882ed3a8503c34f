"""The pusher (``apps.clusters.pusher``, a layer below) with scheduling's rule for a workload it gave
up on: the job returns to pending on a new attempt and its cards are released
(``apps.scheduling.lifecycle.job_push_failed``). The worker's push tasks call these; a caller of the
bare pusher passes its own ``on_failed`` (or none: only the actions are marked failed).
"""

from __future__ import annotations

from typing import Any

from apps.clusters import pusher
from apps.jobs.models import Job
from apps.scheduling.lifecycle import job_push_failed


def workload_push_failed(*, action: Any, reason: str, actor: Any) -> None:
    """``on_failed`` of every push (``apps.clusters.pusher.OnFailed``), called inside the pusher's
    transaction: the lifecycle returns the job to pending with the reason and releases its
    allocations, if it is still on that attempt and scheduled."""
    job = Job.objects.get(pk=action.job_id)
    job_push_failed(job=job, attempt=action.attempt, reason=reason, actor=actor)


def push_job_run(**kwargs: Any) -> dict:
    """``apps.clusters.pusher.push_job_run`` with ``workload_push_failed``."""
    return pusher.push_job_run(on_failed=workload_push_failed, **kwargs)


def push_stream_run(**kwargs: Any) -> dict:
    """``apps.clusters.pusher.push_stream_run`` with ``workload_push_failed``."""
    return pusher.push_stream_run(on_failed=workload_push_failed, **kwargs)


def push_pending_run(**kwargs: Any) -> dict:
    """``apps.clusters.pusher.push_pending_run`` with ``workload_push_failed``."""
    return pusher.push_pending_run(on_failed=workload_push_failed, **kwargs)


def push_cluster_run(**kwargs: Any) -> dict:
    """``apps.clusters.pusher.push_cluster_run`` with ``workload_push_failed``."""
    return pusher.push_cluster_run(on_failed=workload_push_failed, **kwargs)
