"""The pusher reports a failed workload apply with a signal; scheduling's receiver owns the job's fate."""

from __future__ import annotations

import pytest

from apps.clusters.models import PushAction
from apps.clusters.pusher import push_job_run
from apps.clusters.signals import workload_push_failed
from apps.jobs.models import Allocation, JobState
from apps.scheduling.handlers import workload_push_failed_receive
from tests.kube.test_push import a100, ascend, fleet, kube_cluster, member_project, schedule_one, server  # noqa: F401

pytestmark = pytest.mark.django_db


def _workload(job) -> PushAction:
    return PushAction.objects.get(job=job, kind="Job")


def test_a_permanent_failure_sends_one_report_inside_the_failing_transaction(
    server,  # noqa: F811
    kube_cluster,  # noqa: F811
    member_project,  # noqa: F811
    a100,  # noqa: F811
):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")
    seen = []

    def spy(sender, *, action, reason, actor, **kwargs):
        # Sent while the action's FAILED mark is written but not committed: still in the atomic block.
        from django.db import connection

        seen.append((sender, action.pk, action.attempt, reason, actor, connection.in_atomic_block))

    workload_push_failed.connect(spy)
    try:
        assert push_job_run(job_id=job.pk, actor="pusher-test")["failed"] == 1
    finally:
        workload_push_failed.disconnect(spy)
    workload = _workload(job)
    assert seen == [(PushAction, workload.pk, 0, seen[0][3], "pusher-test", True)]
    assert seen[0][3].startswith("push failed: apply Job vision/") and "422" in seen[0][3]
    job.refresh_from_db()
    # Scheduling's receiver (connected in SchedulingConfig.ready) did what the pusher used to do.
    assert job.state == JobState.PENDING and job.attempt == 1 and job.state_reason == seen[0][3]
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_without_the_scheduling_receiver_the_pusher_only_marks_the_action(
    server,  # noqa: F811
    kube_cluster,  # noqa: F811
    member_project,  # noqa: F811
    a100,  # noqa: F811
):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")
    assert workload_push_failed.disconnect(dispatch_uid="scheduling.workload_push_failed")
    try:
        assert push_job_run(job_id=job.pk)["failed"] == 1
    finally:
        workload_push_failed.connect(
            workload_push_failed_receive, dispatch_uid="scheduling.workload_push_failed"
        )
    assert _workload(job).state == PushAction.State.FAILED
    job.refresh_from_db()
    # Nothing in clusters touches jobs or allocations: the decision belongs to scheduling.
    assert job.state == JobState.SCHEDULED and job.attempt == 0
    assert Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_a_receiver_that_raises_rolls_the_failure_back(
    server,  # noqa: F811
    kube_cluster,  # noqa: F811
    member_project,  # noqa: F811
    a100,  # noqa: F811
):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")

    def broken(sender, **kwargs):
        raise RuntimeError("receiver broke")

    workload_push_failed.connect(broken)
    try:
        with pytest.raises(RuntimeError, match="receiver broke"):
            push_job_run(job_id=job.pk)
    finally:
        workload_push_failed.disconnect(broken)
    # Same transaction: neither the FAILED mark nor the job's move happened; the action is retried.
    workload = _workload(job)
    assert workload.state == PushAction.State.PENDING and workload.attempts == 0
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED


def test_a_failed_standalone_object_sends_no_workload_report(server, kube_cluster):  # noqa: F811
    from apps.clusters.outbox import push_object_enqueue
    from apps.clusters.pusher import push_stream_run

    seen = []

    def spy(sender, **kwargs):
        seen.append(kwargs["action"].pk)

    workload_push_failed.connect(spy)
    server.inject(r"/resourcequotas$", status=422, times=1, method="POST")
    try:
        action = push_object_enqueue(
            cluster=kube_cluster,
            manifest={
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "suanchi-quota", "namespace": "default"},
                "spec": {"hard": {"requests.nvidia.com/gpu": "1"}},
            },
        )
        assert push_stream_run(stream=action.stream)["failed"] == 1
    finally:
        workload_push_failed.disconnect(spy)
    action.refresh_from_db()
    assert action.state == PushAction.State.FAILED and seen == []
