"""Preemption and retries: take a job off its cards, delete its objects gracefully, queue it again.

Both paths end the same way: the running attempt's allocations are released, deletes of its
Kubernetes objects are written to the push outbox (applied after commit), and the job returns to
``pending`` with ``attempt + 1`` so the next placement gets fresh object names. When the job has a
checkpoint directory, the next attempt resumes from it (``SUANCHI_RESUME_FROM``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.clusters.outbox import workload_delete_enqueue
from apps.jobs.models import ACTIVE_STATES, Job, JobEvent, JobState
from apps.jobs.services import job_event, job_transition


def _release(job: Job, reason: str, actor: Any) -> None:
    from apps.scheduling.services import allocations_release

    allocations_release(job=job, reason=reason, actor=actor)


@transaction.atomic
def job_preempt(*, job: Job, reason: str, actor: Any) -> bool:
    """Preempt a scheduled or running job: preempted → pending (requeued, resumes from checkpoint).

    Returns whether this call preempted it (False when the job is no longer scheduled / running,
    e.g. it finished or another worker preempted it first).
    """
    attempt = job.attempt
    if not job_transition(job, to=JobState.PREEMPTED, actor=actor, reason=reason, expected=ACTIVE_STATES):
        return False
    _release(job, f"preempted: {reason}", actor)
    deletes = workload_delete_enqueue(job=job, attempt=attempt)
    resume = job.checkpoint_dir or job.resume_from
    job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=f"requeued after preemption: {reason}",
        expected=(JobState.PREEMPTED,),
        attempt=F("attempt") + 1,
        resume_from=resume,
    )
    job.refresh_from_db(fields=["attempt", "resume_from"])
    job_event(
        job,
        kind=JobEvent.Kind.PREEMPTED,
        message=f"preempted (attempt {attempt}): {reason}",
        actor=actor,
        data={"attempt": attempt, "deletes": [f"{d.kind}/{d.name}" for d in deletes], "resume_from": resume},
    )
    return True


@transaction.atomic
def job_retry_or_fail(
    *,
    job: Job,
    reason: str,
    actor: Any,
    failed_nodes: list[str] | None = None,
    count_attempt: bool = True,
    failure_class: str = "",
    now: dt.datetime | None = None,
) -> str:
    """An attempt failed (pod failed, object deleted, node lost). Retry per the job's policy or fail.

    Retries while ``attempt < max_retries`` (``count_attempt=False`` — an infrastructure fault such as
    a lost node — retries without using up the policy): the next attempt waits ``retry_backoff_s``
    doubled per attempt (capped at one hour), avoids the nodes where this one failed and resumes
    from the checkpoint. Returns "retried", "failed", or "" when the job was no longer active.
    """
    now = now or timezone.now()
    attempt = job.attempt
    state = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
    if state not in ACTIVE_STATES:
        return ""
    job.refresh_from_db()
    # Retries that counted against the policy (infrastructure faults and preemptions do not).
    retries_used = job.events.filter(kind=JobEvent.Kind.RETRY, data__counted=True).count()
    if count_attempt and retries_used >= job.max_retries:
        if not job_transition(
            job,
            to=JobState.FAILED,
            actor=actor,
            reason=reason,
            expected=ACTIVE_STATES,
            failure_class=failure_class,
        ):
            return ""
        _release(job, f"failed: {reason}", actor)
        workload_delete_enqueue(job=job, attempt=attempt)
        return "failed"
    backoff = min(3600, job.retry_backoff_s * (2 ** min(retries_used, 10))) if count_attempt else 0
    excluded = sorted(set(job.excluded_nodes or []) | set(failed_nodes or []))
    resume = job.checkpoint_dir or job.resume_from
    if not job_transition(
        job,
        to=JobState.PENDING,
        actor=actor,
        reason=f"retrying: {reason}",
        expected=ACTIVE_STATES,
        attempt=F("attempt") + 1,
        excluded_nodes=excluded,
        retry_not_before=now + dt.timedelta(seconds=backoff),
        resume_from=resume,
        failure_class=failure_class,
    ):
        return ""
    _release(job, f"retry: {reason}", actor)
    workload_delete_enqueue(job=job, attempt=attempt)
    job.refresh_from_db(fields=["attempt"])
    job_event(
        job,
        kind=JobEvent.Kind.RETRY,
        message=(
            f"attempt {attempt} ended: {reason}; attempt {job.attempt} after {backoff} s"
            + (f", avoiding {', '.join(excluded)}" if excluded else "")
            + (f", resuming from {resume}" if resume else "")
        ),
        actor=actor,
        data={
            "attempt": attempt,
            "backoff_s": backoff,
            "excluded_nodes": excluded,
            "resume_from": resume,
            "counted": count_attempt,
            "failure_class": failure_class,
        },
    )
    return "retried"
