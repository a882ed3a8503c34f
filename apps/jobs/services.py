"""Job writes of the jobs layer: the bare state transition (a conditional update), logged as a job
event (``apps.jobs.events``: the one writer of job events, re-exported here as ``job_event``).

What a state change means above the job itself (quota checks at submit, releasing cards, deleting
Kubernetes objects, asking for a scheduling cycle) belongs to the lifecycle one layer up:
``apps.scheduling.lifecycle`` (submit, cancel, finish, preempt, retry, push failed).
"""

from __future__ import annotations

from decimal import Decimal

from django.utils import timezone

from apps.core.stored_text import stored
from apps.jobs.events import job_event
from apps.jobs.models import TRANSITIONS, Job, JobEvent, JobState

# A state change without a reason, shown in the reader's language (apps.core.stored_text).
STATE_CHANGED = stored("%(old)s → %(to)s")


def job_transition(
    job: Job, *, to: str, actor, reason: str = "", expected: tuple[str, ...] | None = None, **extra_fields
) -> bool:
    """Move a job to ``to`` if it is still in one of ``expected`` (default: any state allowed to go there).

    A conditional UPDATE: two workers racing on the same job cannot both win. Returns whether this
    call made the change. Must run inside the caller's transaction when combined with other writes.
    """
    sources = expected or tuple(s for s, targets in TRANSITIONS.items() if to in targets)
    now = timezone.now()
    values = {
        "state": to,
        "state_reason": reason[:500],
        "state_changed_at": now,
        "updated_at": now,
        **extra_fields,
    }
    if to == JobState.RUNNING:
        values.setdefault("started_at", now)
    if to in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        values.setdefault("finished_at", now)
    old = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
    won = Job.objects.filter(pk=job.pk, state__in=sources).update(**values)
    if not won:
        return False
    job_event(
        job,
        kind=JobEvent.Kind.STATE,
        message=reason or STATE_CHANGED % {"old": old, "to": to},
        actor=actor,
        from_state=old or "",
        to_state=to,
    )
    for key, value in values.items():
        setattr(job, key, value)
    return True


def cu_quantize(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.0001"))


__all__ = ["STATE_CHANGED", "cu_quantize", "job_event", "job_transition"]
