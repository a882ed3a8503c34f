"""No card is released while an object using it may still run: cancel, retry and preemption leave
the attempt's allocations *releasing* until the fake API server (through the official client) shows
the Job and its pods gone; meanwhile the engine hands those cards to nobody."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.scheduling.lifecycle import job_cancel, job_preempt
from apps.scheduling.push import push_job_run
from apps.scheduling.reconcile import reconcile_all, reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run
from tests.kube.test_reconcile import node_of, pods_for, schedule_and_push, submit, workload

pytestmark = pytest.mark.django_db


def active(job):
    return Allocation.objects.filter(job=job, released_at__isnull=True)


def run(server, job):
    w = workload(job)
    (pod,) = pods_for(server, w)
    server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Running")
    return w, pod


def test_cancel_keeps_the_cards_while_the_pods_terminate_and_releases_them_once_gone(
    kube_cluster, server, member_project, a100
):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, count=4))  # every card of one node
    node = node_of(job)
    w, pod = run(server, job)
    assert reconcile_cluster(cluster=kube_cluster).running == 1

    job_cancel(job=job, actor=user)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert active(job).count() == 4 and all(a.releasing_since for a in active(job))
    releasing = job.events.get(kind=JobEvent.Kind.RELEASING)
    assert f"Job {w.namespace}/{w.name}" in releasing.message
    assert releasing.data["msgid"].startswith("%(count)s allocation(s) releasing")

    push_job_run(job_id=job.pk)  # DELETE ?propagationPolicy=Background
    assert server.objects("Job", w.namespace) == []
    (terminating,) = pods_for(server, w)
    assert terminating["metadata"]["deletionTimestamp"]  # grace period: its containers still run

    # A pass during the grace period releases nothing, and the cards go to nobody else.
    reconcile_all()
    assert active(job).count() == 4
    other = submit(project, user, a100, name="other", count=4)
    scheduling_cycle_run()
    other.refresh_from_db()
    assert node_of(other) != node

    server.advance(30)  # SIGKILL after the grace period: the pod ends Failed, its containers stopped
    assert [p["status"]["phase"] for p in pods_for(server, w)] == ["Failed"]
    server.advance(1)  # the kubelet's final delete removes it
    assert pods_for(server, w) == []
    reconcile_all()
    assert not active(job).exists()
    released = job.events.filter(kind=JobEvent.Kind.RELEASED).latest("pk")
    assert released.data["confirmed"] is True and node in released.message
    assert all(a.release_reason == "cancelled" for a in Allocation.objects.filter(job=job))


def test_a_retried_attempt_holds_its_cards_until_its_pod_is_gone(kube_cluster, server, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, max_retries=2))
    w0, pod = run(server, job)
    old = list(active(job).values_list("pk", flat=True))
    server.set_node_ready(node_of(job), False)  # NotReady: rescheduled, the pod is not gone
    assert reconcile_cluster(cluster=kube_cluster).retried == 1
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempt == 1
    assert set(active(job).values_list("pk", flat=True)) == set(old)

    push_job_run(job_id=job.pk)
    assert pods_for(server, w0)[0]["metadata"]["deletionTimestamp"]
    reconcile_cluster(cluster=kube_cluster)
    assert set(active(job).values_list("pk", flat=True)) == set(old)
    # The node stays NotReady beyond the default 300 s toleration: its pods count as gone.
    later = timezone.now() + dt.timedelta(seconds=301)
    reconcile_cluster(cluster=kube_cluster, now=later)
    assert not Allocation.objects.filter(pk__in=old, released_at__isnull=True).exists()
    released = job.events.filter(kind=JobEvent.Kind.RELEASED).latest("pk")
    assert "NotReady for over 300 s" in released.message


def test_a_new_attempt_does_not_release_the_old_attempts_cards(kube_cluster, server, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100, checkpoint_dir="/ckpt/r"))
    w0, pod = run(server, job)
    old = list(active(job).values_list("pk", flat=True))
    assert job_preempt(job=job, reason="a critical job needs the card", actor="scheduler")
    push_job_run(job_id=job.pk)
    assert pods_for(server, w0)[0]["metadata"]["deletionTimestamp"]
    Job.objects.filter(pk=job.pk).update(retry_not_before=None)
    job = schedule_and_push(job)  # attempt 1 lands elsewhere while attempt 0's pod terminates
    assert job.attempt == 1
    w1, _pod = run(server, job)
    result = reconcile_cluster(cluster=kube_cluster)
    assert result.running == 1 and result.retried == result.failed == 0
    assert Allocation.objects.filter(pk__in=old, released_at__isnull=True).count() == len(old)

    server.advance(30)
    reconcile_cluster(cluster=kube_cluster)
    assert not Allocation.objects.filter(pk__in=old, released_at__isnull=True).exists()
    assert active(job).filter(attempt=1).count() == 1  # the running attempt keeps its cards


def test_a_queued_job_holds_nothing_and_one_never_pushed_is_released_once_confirmed(
    kube_cluster, server, member_project, a100
):
    user, project = member_project
    queued = submit(project, user, a100, name="queued")  # pending: holds nothing
    job_cancel(job=queued, actor=user)
    assert not queued.events.filter(kind__in=[JobEvent.Kind.RELEASING, JobEvent.Kind.RELEASED]).exists()

    job = submit(project, user, a100)
    assert job.pk in scheduling_cycle_run().placed_job_ids  # scheduled, its apply still pending
    job_cancel(job=job, actor=user)
    # The apply might be in flight: the cards are held until the delete confirms there is nothing.
    assert active(job).count() == 1
    push_job_run(job_id=job.pk)
    reconcile_all()
    assert not active(job).exists()
