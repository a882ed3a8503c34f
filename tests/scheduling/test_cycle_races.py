"""Races between scheduling cycles that a single-threaded test cannot see."""

from __future__ import annotations

import pytest

from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling import services
from apps.scheduling.lifecycle import job_preempt
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def test_a_job_requeued_by_another_cycle_is_placed_with_its_current_attempt(fleet, member_project, a100):
    """Cycle B loads the job (attempt 0); meanwhile cycle A places it and a reclaim preempts it
    (attempt 1, pending again). B must write attempt-1 slots, not collide with the released attempt-0
    rows (a unique-slot violation that aborted B's whole batch)."""
    user, project = member_project
    job = submit_whole_cards(project, user, a100)
    stale = list(services.queued_jobs())  # what cycle B loaded
    assert [j.attempt for j in stale] == [0]
    assert job.pk in services.scheduling_cycle_run().placed_job_ids  # cycle A
    first = Allocation.objects.get(job=job)
    assert job_preempt(job=Job.objects.get(pk=job.pk), reason="reclaim", actor="test")

    original = services.queued_jobs
    try:
        services.queued_jobs = lambda limit=None: stale  # cycle B goes on with what it loaded
        result = services.scheduling_cycle_run()
    finally:
        services.queued_jobs = original
    assert job.pk in result.placed_job_ids
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED and job.attempt == 1
    # attempt 0's row is releasing (held until its objects are confirmed gone), attempt 1's is the job's
    current = Allocation.objects.get(job=job, released_at__isnull=True, releasing_since__isnull=True)
    assert current.attempt == 1 and first.attempt == 0
