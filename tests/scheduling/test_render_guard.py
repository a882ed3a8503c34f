"""One job whose Kubernetes objects cannot be rendered stays pending with the reason; the cycle goes on.

Before: an exception while rendering manifests was raised inside the cycle's persist transaction, so
one job (e.g. a cross-node replica before the per-node split) rolled back every placement of the batch,
every cycle. No real input renders badly today, so the failure is injected into the renderer.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.clusters import outbox
from apps.clusters.models import PushAction
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards


def _submit(project, user, a100, name):
    return submit_whole_cards(project, user, a100, name=name, image="pytorch:2.3")


@pytest.mark.django_db
def test_a_job_that_cannot_be_rendered_stays_pending_and_the_others_are_placed(
    fleet, member_project, a100, monkeypatch
):
    user, project = member_project
    good = [_submit(project, user, a100, f"good{i}") for i in range(3)]
    bad = _submit(project, user, a100, "bad")
    real = outbox.workload_objects

    def render(job, allocations, cluster, *, attempt, **kwargs):
        if job.pk == bad.pk:
            raise ValueError("no manifest can express this placement")
        return real(job, allocations, cluster, attempt=attempt, **kwargs)

    monkeypatch.setattr(outbox, "workload_objects", render)
    result = scheduling_cycle_run()

    assert sorted(result.placed_job_ids) == sorted(j.pk for j in good)
    assert result.pending_error_ids == [bad.pk]
    bad.refresh_from_db()
    assert bad.state == JobState.PENDING
    assert "could not be rendered" in bad.state_reason
    assert "ValueError: no manifest can express this placement" in bad.state_reason
    # nothing half-written for it: no cards, no push actions; the others have both
    assert not Allocation.objects.filter(job=bad).exists()
    assert not PushAction.objects.filter(job=bad).exists()
    for job in good:
        assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 1
        assert PushAction.objects.filter(job=job).exists()
        assert Job.objects.get(pk=job.pk).state == JobState.SCHEDULED
    event = JobEvent.objects.filter(job=bad, kind=JobEvent.Kind.PENDING).latest("pk")
    assert event.data["render_error"].startswith("ValueError")

    # the same reason is not written again next cycle (the job is parked until something is released)
    again = scheduling_cycle_run()
    assert bad.pk not in again.placed_job_ids
    assert JobEvent.objects.filter(job=bad, kind=JobEvent.Kind.PENDING).count() == 1

    # once rendering works again and the job is touched (an edit wakes a parked job), it is placed
    monkeypatch.setattr(outbox, "workload_objects", real)
    Job.objects.filter(pk=bad.pk).update(updated_at=timezone.now())
    final = scheduling_cycle_run()
    assert bad.pk in final.placed_job_ids
