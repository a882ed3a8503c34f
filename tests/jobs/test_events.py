"""The one writer of job events (``apps.jobs.events.record_job_events``): single, bulk and COPY writes
alike raise the notification of a final state (issue 30: a bulk-written FAILED event lost it when a
``post_save`` receiver sent it)."""

from __future__ import annotations

import pytest

from apps.jobs.events import record_job_events
from apps.jobs.models import Job, JobEvent, JobState
from apps.notify import services
from apps.notify.models import Delivery


@pytest.fixture
def member(make_user, make_project):
    user = make_user("ops-member")
    project = make_project("ops", members=[user], role="member")
    services.subscription_create(
        actor=user, channel="email", target="member@example.com", events=["job.failed", "job.succeeded"]
    )
    return user, project


def _job(project, user, name):
    return Job.objects.create(
        project=project,
        name=name,
        image="x:1",
        request_kind="whole_cards",
        state=JobState.RUNNING,
        submitted_by=user,
    )


def _ended(job, to_state, message="exit code 137"):
    return JobEvent(
        job=job,
        kind=JobEvent.Kind.STATE,
        from_state=JobState.RUNNING,
        to_state=to_state,
        message=message,
        actor_label="test",
    )


@pytest.mark.django_db
@pytest.mark.parametrize("copy", [False, True], ids=["bulk_create", "copy"])
def test_a_bulk_written_failed_event_notifies(member, copy):
    user, project = member
    failed, done, running = (_job(project, user, n) for n in ("train-a", "train-b", "train-c"))
    events = [
        _ended(failed, JobState.FAILED),
        _ended(done, JobState.SUCCEEDED, "exit code 0"),
        JobEvent(job=running, kind=JobEvent.Kind.PENDING, message="waiting", actor_label="test"),
    ]
    record_job_events(events, copy=copy)
    assert JobEvent.objects.filter(job__project=project).count() == 3
    payloads = {d.payload["event"]: d.payload for d in Delivery.objects.all()}
    assert set(payloads) == {"job.failed", "job.succeeded"}  # the pending event notifies nobody
    assert (
        "train-a" in payloads["job.failed"]["message"]
        and "exit code 137" in payloads["job.failed"]["message"]
    )
    assert payloads["job.failed"]["data"] == {"job": failed.pk, "attempt": failed.attempt, "state": "failed"}


@pytest.mark.django_db
def test_the_same_final_state_written_twice_notifies_once(member):
    user, project = member
    job = _job(project, user, "train")
    record_job_events([_ended(job, JobState.FAILED)])
    record_job_events([_ended(job, JobState.FAILED)])  # e.g. a retried worker: same job, attempt, state
    assert Delivery.objects.count() == 1
