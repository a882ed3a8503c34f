"""Receivers of what the layers below report (connected in ``SchedulingConfig.ready``)."""

from __future__ import annotations

from typing import Any

from apps.jobs.models import Job
from apps.scheduling.lifecycle import job_push_failed


def workload_push_failed_receive(sender: Any, *, action: Any, reason: str, actor: Any, **kwargs: Any) -> None:
    """A job's workload apply failed for good (``apps.clusters.signals.workload_push_failed``, sent
    inside the pusher's transaction): the lifecycle returns the job to pending with the reason and
    releases its allocations, if it is still on that attempt and scheduled."""
    job = Job.objects.get(pk=action.job_id)
    job_push_failed(job=job, attempt=action.attempt, reason=reason, actor=actor)


def node_released_receive(sender: Any, **kwargs: Any) -> None:
    """A node came back from quarantine (``apps.inventory.signals.node_released``): see
    ``apps.scheduling.service_nodes.node_released_receive`` (imported when needed: the scaling
    service it uses is not loaded at start-up)."""
    from apps.scheduling.service_nodes import node_released_receive as receive

    receive(sender, **kwargs)
