"""The one writer of job events (``JobEvent``), for single and bulk writes alike.

Every job event goes through ``record_job_events``: the state changes (``apps.jobs.services``), the
scheduling cycle's thousands at once (``COPY``), releases, read-back findings. The notifications a
final state raises (failed, preempted, succeeded) are queued from here, in the caller's transaction
(``apps.notify.services.notify``), so no way of writing an event can skip them — a ``post_save``
receiver would not hear ``bulk_create`` or ``COPY``.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.urls import reverse
from django.utils.translation import gettext_noop

from apps.core.audit import actor_fields
from apps.core.bulk import copy_create
from apps.jobs.models import Job, JobEvent, JobState
from apps.notify.models import Event
from apps.notify.services import notify

# The job states people hear about: (notification event, its sentence).
JOB_NOTIFICATIONS = {
    JobState.FAILED: (
        Event.JOB_FAILED,
        gettext_noop("Job %(job)s of project %(project)s failed: %(reason)s"),
    ),
    JobState.PREEMPTED: (
        Event.JOB_PREEMPTED,
        gettext_noop("Job %(job)s of project %(project)s was preempted: %(reason)s"),
    ),
    JobState.SUCCEEDED: (Event.JOB_SUCCEEDED, gettext_noop("Job %(job)s of project %(project)s succeeded.")),
}


def record_job_events(events: Iterable[JobEvent], *, copy: bool = False) -> list[JobEvent]:
    """Write ``events`` and queue the notifications of those that enter a final state people hear
    about. One event is one INSERT, several one ``bulk_create``; ``copy`` writes them with ``COPY``
    (``apps.core.bulk.copy_create``: the scheduling cycle's batches; the new rows' keys are not set).
    Messages are cut to the column's 1,000 characters. Returns the events."""
    events = list(events)
    for event in events:
        event.message = (event.message or "")[:1000]
    if copy:
        copy_create(events)
    elif len(events) == 1:
        events[0].save(force_insert=True)
    elif events:
        JobEvent.objects.bulk_create(events)
    for event in events:
        if event.to_state in JOB_NOTIFICATIONS:
            _notify(event)
    return events


def job_event(
    job: Job, *, kind: str, message: str, actor, from_state: str = "", to_state: str = "", data=None
) -> JobEvent:
    """Write one event of ``job`` (``record_job_events``), by ``actor``."""
    (event,) = record_job_events(
        [
            JobEvent(
                job=job,
                kind=kind,
                message=message,
                from_state=from_state,
                to_state=to_state,
                actor_label=actor_fields(actor)["actor_label"],
                data=data or {},
            )
        ]
    )
    return event


def _notify(event: JobEvent) -> None:
    """Queue the notification of a job entering ``event.to_state`` (once per job, attempt and state)."""
    job = event.job
    kind, message = JOB_NOTIFICATIONS[event.to_state]
    notify(
        kind,
        key=f"job:{job.pk}:{job.attempt}:{event.to_state}",
        message=message,
        params={"job": job.name, "project": job.project.slug, "reason": event.message[:300]},
        project=job.project,
        users=[job.submitted_by],
        link=reverse("jobs:detail", kwargs={"pk": job.pk}),
        data={"job": job.pk, "attempt": job.attempt, "state": event.to_state},
    )
