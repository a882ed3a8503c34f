"""The pusher hands a failed workload apply to its caller's ``on_failed``; scheduling's rule
(``apps.scheduling.push``) owns the job's fate."""

from __future__ import annotations

import pytest

from apps.clusters import pusher
from apps.clusters.models import PushAction
from apps.jobs.models import Allocation, JobState
from apps.scheduling.push import push_job_run, workload_push_failed
from tests.kube.test_push import schedule_one

pytestmark = pytest.mark.django_db


def _workload(job) -> PushAction:
    return PushAction.objects.get(job=job, kind="Job")


def test_a_permanent_failure_is_handed_over_once_inside_the_failing_transaction(
    server, kube_cluster, member_project, a100
):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")
    seen = []

    def spy(*, action, reason, actor):
        # Called while the action's FAILED mark is written but not committed: still in the atomic block.
        from django.db import connection

        seen.append((action.pk, action.attempt, reason, actor, connection.in_atomic_block))
        workload_push_failed(action=action, reason=reason, actor=actor)

    assert pusher.push_job_run(job_id=job.pk, actor="pusher-test", on_failed=spy)["failed"] == 1
    workload = _workload(job)
    assert seen == [(workload.pk, 0, seen[0][2], "pusher-test", True)]
    assert seen[0][2].startswith("push failed: apply Job vision/") and "422" in seen[0][2]
    job.refresh_from_db()
    # Scheduling's rule did what the pusher used to do.
    assert job.state == JobState.PENDING and job.attempt == 1 and job.state_reason == seen[0][2]
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_scheduling_push_applies_the_rule(server, kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")
    assert push_job_run(job_id=job.pk)["failed"] == 1
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempt == 1
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_without_on_failed_the_pusher_only_marks_the_action(server, kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")
    assert pusher.push_job_run(job_id=job.pk)["failed"] == 1
    assert _workload(job).state == PushAction.State.FAILED
    job.refresh_from_db()
    # Nothing in clusters touches jobs or allocations: the decision belongs to scheduling.
    assert job.state == JobState.SCHEDULED and job.attempt == 0
    assert Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_an_on_failed_that_raises_rolls_the_failure_back(server, kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")

    def broken(**kwargs):
        raise RuntimeError("on_failed broke")

    with pytest.raises(RuntimeError, match="on_failed broke"):
        pusher.push_job_run(job_id=job.pk, on_failed=broken)
    # Same transaction: neither the FAILED mark nor the job's move happened; the action is retried.
    workload = _workload(job)
    assert workload.state == PushAction.State.PENDING and workload.attempts == 0
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED


def test_a_failed_standalone_object_is_not_handed_over(server, kube_cluster):
    from apps.clusters.outbox import push_object_enqueue

    seen = []
    server.inject(r"/resourcequotas$", status=422, times=1, method="POST")
    action = push_object_enqueue(
        cluster=kube_cluster,
        manifest={
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "suanchi-quota", "namespace": "default"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "1"}},
        },
    )
    on_failed = lambda **kwargs: seen.append(kwargs["action"].pk)  # noqa: E731
    assert pusher.push_stream_run(stream=action.stream, on_failed=on_failed)["failed"] == 1
    action.refresh_from_db()
    assert action.state == PushAction.State.FAILED and seen == []
