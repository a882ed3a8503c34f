"""Scaling an inference service allocates or releases cards with its replicas, through the outbox."""

from __future__ import annotations

import pytest

from apps.clusters.models import PushAction
from apps.clusters.pusher import push_job_run
from apps.core.errors import ValidationFailed
from apps.jobs.models import Allocation, JobEvent, JobState
from apps.scheduling.scaling import inference_scale
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def service(project, user, model, replicas=1, count=1):
    job = submit_whole_cards(
        project, user, model, count, name="serve", kind="inference", image="vllm:0.6", replicas=replicas
    )
    assert job.pk in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    return job


def active(job):
    return Allocation.objects.filter(job=job, released_at__isnull=True)


def deployment_replicas(job):
    action = PushAction.objects.filter(job=job, kind="Deployment").order_by("-seq").first()
    return action.object["spec"]["replicas"]


def test_scale_up_allocates_cards_and_reapplies_the_deployment(fleet, member_project, a100):
    user, project = member_project
    job = service(project, user, a100)
    assert inference_scale(job=job, replicas=3, actor="autoscaler", reason="load") == 3
    job.refresh_from_db()
    assert job.replicas == 3
    assert sorted(active(job).values_list("replica", flat=True)) == [0, 1, 2]
    assert deployment_replicas(job) == 3
    assert push_job_run(job_id=job.pk)["failed"] == 0
    event = job.events.filter(kind=JobEvent.Kind.SCALED).last()
    assert event.data == {"from": 1, "to": 3, "asked": 3}


def test_scale_down_releases_the_highest_replicas(fleet, member_project, a100):
    user, project = member_project
    job = service(project, user, a100, replicas=3)
    assert inference_scale(job=job, replicas=1, actor="autoscaler") == 1
    assert list(active(job).values_list("replica", flat=True)) == [0]
    assert deployment_replicas(job) == 1
    assert Allocation.objects.filter(job=job, released_at__isnull=False).count() == 2


def test_scale_up_takes_what_fits_and_never_overallocates(fleet, member_project, a100):
    user, project = member_project
    job = service(project, user, a100, count=4)  # a whole A100 node per replica; two nodes exist
    assert inference_scale(job=job, replicas=5, actor="autoscaler") == 2
    per_device = {}
    for device_id in Allocation.objects.filter(released_at__isnull=True).values_list("device_id", flat=True):
        per_device[device_id] = per_device.get(device_id, 0) + 1
    assert max(per_device.values()) == 1
    assert "asked 5" in job.events.filter(kind=JobEvent.Kind.SCALED).last().message


def test_only_running_inference_services_scale(fleet, member_project, a100):
    user, project = member_project
    train = submit_whole_cards(project, user, a100)
    with pytest.raises(ValidationFailed, match="only inference services scale"):
        inference_scale(job=train, replicas=2, actor="x")
    job = service(project, user, a100)
    with pytest.raises(ValidationFailed, match="between 1 and 64"):
        inference_scale(job=job, replicas=0, actor="x")
    assert job.state == JobState.SCHEDULED and active(job).count() == 1


def test_scaling_keeps_the_requested_cu_of_what_the_job_asks_for_now(fleet, member_project, a100):
    """Issue 21 §4: a service scaled 2 → 1 no longer shows the CU per hour of two replicas."""
    user, project = member_project
    job = service(project, user, a100, replicas=2)
    assert job.requested_cu == 2
    inference_scale(job=job, replicas=1, actor="autoscaler")
    job.refresh_from_db()
    assert job.requested_cu == 1
    inference_scale(job=job, replicas=3, actor="autoscaler")
    job.refresh_from_db()
    assert job.requested_cu == 3
