"""Push through an outbox: scheduling writes push actions; push_job_run applies them after commit."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from django.utils import timezone

from apps.clusters.connections import backend_for
from apps.clusters.models import PushAction
from apps.clusters.pusher import backoff_delay, push_due_streams
from apps.inventory.models import Cluster
from apps.jobs.models import Allocation, JobState
from apps.scheduling.push import push_job_run
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from worker.tasks.push import push_pending_task, push_stream_task

pytestmark = pytest.mark.django_db

# The job tests' fleet: two A100 nodes and an Ascend node in cluster "prod".


def schedule_one(project, user, a100, name="train"):
    job = submit_whole_cards(project, user, a100, name=name, image="pytorch:2.3")
    result = scheduling_cycle_run()
    assert job.pk in result.placed_job_ids
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    return job


def actions(job):
    return list(PushAction.objects.filter(job=job).order_by("attempt", "seq"))


def test_scheduling_writes_namespace_then_workload(kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    rows = actions(job)
    assert [(a.seq, a.verb, a.kind, a.state) for a in rows] == [
        (0, "apply", "Namespace", "pending"),
        (1, "apply", "Job", "pending"),
    ]
    assert rows[0].cluster_id == kube_cluster.pk and rows[1].namespace == rows[0].name
    assert rows[1].object["metadata"]["name"] == f"suanchi-{job.pk}-a0"
    assert push_due_streams() == [f"job:{job.pk}"]


def test_push_applies_once_through_the_fake_api_server(server, kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    summary = push_job_run(job_id=job.pk)
    assert summary["applied"] == 2 and summary["errors"] == []
    ns, workload = actions(job)
    assert ns.state == workload.state == PushAction.State.APPLIED
    assert workload.result["action"] == "created" and workload.result["uid"]
    assert workload.applied_at is not None and workload.attempts == 1
    assert [o["metadata"]["name"] for o in server.objects("Namespace")] == [ns.name]
    assert [o["metadata"]["name"] for o in server.objects("Job")] == [workload.name]

    # Re-delivery: nothing pending, nothing changes.
    assert push_job_run(job_id=job.pk)["applied"] == 0
    assert len(server.objects("Job")) == 1 and len(server.objects("Namespace")) == 1
    # Crash after the call, before the outcome was recorded: the re-apply is idempotent.
    PushAction.objects.filter(pk=workload.pk).update(state=PushAction.State.PENDING)
    assert push_job_run(job_id=job.pk)["applied"] == 1
    workload.refresh_from_db()
    assert workload.result["action"] == "unchanged"
    assert len(server.objects("Job")) == 1
    assert push_due_streams() == []


def test_transient_error_backs_off_then_applies(server, kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=500, times=1, method="POST")
    now = timezone.now()
    summary = push_job_run(job_id=job.pk, now=now)
    assert summary["applied"] == 1 and summary["retry"] == 1
    ns, workload = actions(job)
    assert ns.state == PushAction.State.APPLIED
    assert workload.state == PushAction.State.PENDING and workload.attempts == 1
    assert "500" in workload.last_error and workload.next_attempt_at > now
    assert server.objects("Job") == []
    # Not due yet: nothing happens.
    assert push_job_run(job_id=job.pk, now=now)["waiting"] == 1
    assert push_due_streams(now=now) == []

    later = now + dt.timedelta(minutes=10)
    assert push_due_streams(now=later) == [f"job:{job.pk}"]
    assert push_job_run(job_id=job.pk, now=later)["applied"] == 1
    workload.refresh_from_db()
    assert workload.state == PushAction.State.APPLIED and workload.attempts == 2
    assert len(server.objects("Job")) == 1
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED


def test_transient_errors_are_bounded(server, kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=503, times=10, method="POST")
    now = timezone.now()
    for i in range(3):
        push_job_run(job_id=job.pk, max_attempts=3, now=now + dt.timedelta(hours=i))
    workload = actions(job)[1]
    assert workload.state == PushAction.State.FAILED and workload.attempts == 3
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert "push failed" in job.state_reason and workload.name in job.state_reason
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_permanent_error_returns_the_job_to_pending(server, kube_cluster, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100)
    server.inject(r"/jobs$", status=422, times=1, method="POST")
    summary = push_job_run(job_id=job.pk)
    assert summary["failed"] == 1
    workload = actions(job)[1]
    assert workload.state == PushAction.State.FAILED and "422" in workload.last_error
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert f"Job vision/{workload.name}" in job.state_reason and "422" in job.state_reason
    assert Allocation.objects.filter(job=job).exists()
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert server.objects("Job") == []

    assert job.attempt == 1

    # Scheduled again as attempt 1: new actions, applied; the old attempt's rows stay as history.
    assert job.pk in scheduling_cycle_run().placed_job_ids
    rows = actions(job)
    assert [(a.attempt, a.seq, a.state) for a in rows] == [
        (0, 0, "applied"),
        (0, 1, "failed"),
        (1, 0, "pending"),
        (1, 1, "pending"),
    ]
    assert push_job_run(job_id=job.pk)["applied"] == 2
    assert [o["metadata"]["name"] for o in server.objects("Job")] == [f"suanchi-{job.pk}-a1"]


def test_simulated_backend(fleet, member_project, a100):
    user, project = member_project
    job = schedule_one(project, user, a100, name="sim")
    assert push_job_run(job_id=job.pk)["applied"] == 2
    ns, workload = actions(job)
    assert workload.state == PushAction.State.APPLIED and workload.result["uid"]
    cluster = Cluster.objects.get(slug="prod")
    assert backend_for(cluster).get("Job", workload.namespace, workload.name) is not None


def test_cancelled_job_is_not_pushed(kube_cluster, server, member_project, a100):
    from apps.jobs.services import job_transition

    user, project = member_project
    job = schedule_one(project, user, a100)
    job_transition(job, to=JobState.CANCELLED, actor="test")
    assert push_job_run(job_id=job.pk)["failed"] == 2
    assert server.objects("Job") == [] and server.objects("Namespace") == []


def test_broker_outage_does_not_fail_scheduling(
    fleet, member_project, a100, django_capture_on_commit_callbacks
):
    user, project = member_project
    job = submit_whole_cards(project, user, a100, name="x", image="pytorch:2.3")
    broker_down = ConnectionError("broker down")
    with (
        mock.patch.object(push_stream_task, "apply_async", side_effect=broker_down) as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        result = scheduling_cycle_run()
    assert job.pk in result.placed_job_ids and send.called
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    # The periodic task catches up.
    assert push_pending_task()["pushed"] == [f"job:{job.pk}"]
    assert all(a.state == PushAction.State.APPLIED for a in actions(job))


def test_enqueue_after_commit_sends_the_task(fleet, member_project, a100, django_capture_on_commit_callbacks):
    user, project = member_project
    job = submit_whole_cards(project, user, a100, name="y", image="pytorch:2.3")
    with (
        mock.patch.object(push_stream_task, "apply_async") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        scheduling_cycle_run()
    send.assert_called_once_with(args=[f"job:{job.pk}"], queue="push")


def test_backoff_grows_with_jitter_and_a_cap():
    for attempts in range(1, 12):
        delay = backoff_delay(attempts, base=2, cap=300)
        full = min(300, 2 * 2 ** (attempts - 1))
        assert full / 2 <= delay <= full


def test_an_object_whose_namespace_is_not_there_yet_waits_for_it(server, kube_cluster):
    from apps.clusters.outbox import push_object_enqueue
    from apps.scheduling.push import push_stream_run

    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "suanchi-quota",
            "namespace": "late",
            "labels": {"app.kubernetes.io/managed-by": "suanchi"},
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
    }
    action = push_object_enqueue(cluster=kube_cluster, manifest=quota)
    summary = push_stream_run(stream=action.stream)
    assert summary["retry"] == 1 and summary["failed"] == 0
    action.refresh_from_db()
    assert action.state == PushAction.State.PENDING and "not found" in action.last_error
    backend_for(kube_cluster).apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "late"}})
    later = timezone.now() + dt.timedelta(hours=1)
    assert push_stream_run(stream=action.stream, now=later)["applied"] == 1
    assert [q["metadata"]["name"] for q in server.objects("ResourceQuota", "late")] == ["suanchi-quota"]


def test_a_changed_job_gets_422_and_suanchi_never_releases_the_cards_of_a_live_job(
    server, kube_cluster, member_project, a100
):
    """A Job's spec.template is immutable (pkg/apis/batch/validation ValidateJobSpecUpdate): an
    apply of the same Job name with another template gets 422 Invalid. The pusher must not loop on
    the 422 nor fail the push (which releases the cards while the live Job runs): it deletes the live
    Job (Background), waits until the Job and its terminating pods are gone, then creates the new one."""
    from apps.clusters.outbox import push_actions_enqueue
    from apps.jobs.models import Job
    from apps.scheduling.reconcile import reconcile_cluster

    for name in ("gpu-01", "gpu-02", "npu-01"):
        server.add_node(name)
    user, project = member_project
    job = schedule_one(project, user, a100)
    assert push_job_run(job_id=job.pk)["failed"] == 0
    (old,) = server.objects("Job", project.slug)
    (pod,) = server.objects("Pod", project.slug)
    server.set_pod_phase(project.slug, pod["metadata"]["name"], "Running")
    cards = set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("pk", flat=True))
    assert cards

    # The same attempt rendered again, differently (e.g. after an upgrade of Suanchi's manifests).
    Job.objects.filter(pk=job.pk).update(image="pytorch:2.5")
    job.refresh_from_db()
    allocations = list(
        Allocation.objects.filter(job=job, attempt=job.attempt).select_related("device", "node")
    )
    push_actions_enqueue(job=job, allocations=allocations, cluster=kube_cluster)
    server.requests.clear()

    def unchanged():
        job.refresh_from_db()
        assert job.state == JobState.SCHEDULED and job.attempt == 0
        assert (
            set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("pk", flat=True))
            == cards
        )

    summary = push_job_run(job_id=job.pk)
    assert summary["failed"] == 0 and summary["retry"] == 1
    assert "422" in summary["errors"][0] and "field is immutable" in summary["errors"][0]
    unchanged()
    workload = PushAction.objects.filter(job=job, kind="Job").latest("seq")
    assert workload.state == PushAction.State.PENDING and "spec.template" in workload.last_error
    assert server.objects("Job", project.slug) == []  # deleted with Background …
    (terminating,) = server.objects("Pod", project.slug)  # … its pod ends gracefully
    assert terminating["metadata"]["deletionTimestamp"]

    later = timezone.now() + dt.timedelta(seconds=10)
    summary = push_job_run(job_id=job.pk, now=later)
    assert summary["waiting"] == 1 and summary["failed"] == 0
    assert server.objects("Job", project.slug) == []  # not created while the old pod holds the card
    unchanged()
    assert reconcile_cluster(cluster=kube_cluster).failed == 0  # nor "deleted behind our back"
    unchanged()

    server.advance(30)  # the kubelet stops the old pod (grace period) …
    server.advance(0)  # … and removes it
    summary = push_job_run(job_id=job.pk, now=later + dt.timedelta(seconds=10))
    assert summary["applied"] == 1 and summary["failed"] == 0
    (new,) = server.objects("Job", project.slug)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["template"]["spec"]["containers"][0]["image"] == "pytorch:2.5"
    workload.refresh_from_db()
    assert (
        workload.state == PushAction.State.APPLIED and workload.result["replaced"] == old["metadata"]["uid"]
    )
    unchanged()
    patches = [p for m, p in server.requests if m == "PATCH" and "/jobs/" in p]
    assert len(patches) == 1  # one refused patch, no loop


def test_a_cycle_placing_several_jobs_sends_one_message_for_all_their_streams(
    fleet, member_project, a100, django_capture_on_commit_callbacks
):
    """Issue 20: one broker publish per scheduling batch, not per job (the publish dominated persist)."""
    from worker.tasks.push import push_streams_task

    user, project = member_project
    jobs = [submit_whole_cards(project, user, a100, name=f"j{i}", image="pytorch:2.3") for i in range(3)]
    with (
        mock.patch.object(push_streams_task, "apply_async") as many,
        mock.patch.object(push_stream_task, "apply_async") as one,
        django_capture_on_commit_callbacks(execute=True),
    ):
        result = scheduling_cycle_run()
    assert set(result.placed_job_ids) == {j.pk for j in jobs}
    many.assert_called_once()
    assert sorted(many.call_args.kwargs["args"][0]) == sorted(f"job:{j.pk}" for j in jobs)
    assert not one.called
    # The worker side: one task applies every stream of the batch.
    totals = push_streams_task.run(sorted(f"job:{j.pk}" for j in jobs))
    assert all(a.state == PushAction.State.APPLIED for j in jobs for a in actions(j)), totals
