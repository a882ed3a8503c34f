"""Receivers of what the layers below report (connected in ``SchedulingConfig.ready``)."""

from __future__ import annotations

from typing import Any

from django.db.models import F

from apps.jobs.models import Job, JobState
from apps.jobs.services import job_transition


def workload_push_failed_receive(sender: Any, *, action: Any, reason: str, actor: Any, **kwargs: Any) -> None:
    """A job's workload apply failed for good (``apps.clusters.signals.workload_push_failed``, sent
    inside the pusher's transaction): return the job to pending with the reason and release its
    allocations, if it is still on that attempt and scheduled."""
    from apps.scheduling.services import allocations_release

    job = Job.objects.get(pk=action.job_id)
    if job.attempt == action.attempt and job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=reason,
        expected=(JobState.SCHEDULED,),
        # A new attempt: its allocations and objects must not collide with this one's.
        attempt=F("attempt") + 1,
    ):
        allocations_release(job=job, reason=reason, actor=actor)
