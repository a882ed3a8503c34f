"""The demo end to end on the simulated cluster: submit → scheduled → pushed → running → succeeded,
allocations released, events on the job page; and render_manifests --all on the demo database."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse
from kubernetes_validate.utils import resources_from_file

from apps.clusters.connections import backend_for
from apps.clusters.models import PushAction
from apps.clusters.pusher import push_due_streams, push_stream_run
from apps.inventory.models import Cluster
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.reconcile import reconcile_all
from apps.scheduling.services import scheduling_cycle_run
from tests.kube.validation import assert_strict_valid

pytestmark = pytest.mark.django_db


def push_all() -> int:
    applied = 0
    for _ in range(5):  # bounded: streams written while pushing are picked up next round
        streams = push_due_streams(limit=1000)
        if not streams:
            break
        for stream in streams:
            applied += push_stream_run(stream=stream)["applied"]
    return applied


def test_demo_jobs_run_to_completion_on_the_simulated_cluster(client):
    call_command("load_demo")
    scheduling_cycle_run()
    scheduled = list(Job.objects.filter(state=JobState.SCHEDULED))
    assert len(scheduled) >= 3
    assert push_all() >= len(scheduled)
    assert not PushAction.objects.filter(state=PushAction.State.FAILED).exists()

    clusters = {a.node.cluster for a in Allocation.objects.filter(released_at__isnull=True)}
    for cluster in clusters:
        assert cluster.backend == Cluster.Backend.SIMULATED
        backend_for(cluster).advance(10)
    reconcile_all()
    running = Job.objects.filter(pk__in=[j.pk for j in scheduled], state=JobState.RUNNING)
    assert running.count() == len(scheduled)

    for cluster in clusters:
        backend_for(cluster).advance(2 * 24 * 3600)  # longer than any batch job runs
    reconcile_all()
    batch = [j for j in scheduled if j.kind != Job.Kind.INFERENCE]
    services = [j for j in scheduled if j.kind == Job.Kind.INFERENCE]
    for job in batch:
        job.refresh_from_db()
        assert job.state == JobState.SUCCEEDED, (job.name, job.state, job.state_reason)
        assert not job.allocations.filter(released_at__isnull=True).exists()
    for job in services:  # an inference Deployment serves until stopped
        job.refresh_from_db()
        assert job.state == JobState.RUNNING

    # The queue moves on: cards freed by finished jobs take waiting ones.
    waiting = Job.objects.filter(state=JobState.PENDING).count()
    scheduling_cycle_run()
    assert Job.objects.filter(state=JobState.PENDING).count() <= waiting

    # The job page shows the whole story to its project's member.
    job = batch[0]
    client.force_login(job.submitted_by)
    page = client.get(reverse("jobs:detail", args=[job.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    for state in ("scheduled", "running", "succeeded", "released"):
        assert state in text


def test_render_manifests_all_on_the_demo_database_validates(tmp_path, capsys):
    call_command("load_demo")
    scheduling_cycle_run()
    assert Job.objects.filter(state=JobState.SCHEDULED).exists()
    call_command("render_manifests", "--all", "--out", str(tmp_path))
    assert "wrote" in capsys.readouterr().out
    files = sorted(tmp_path.iterdir())
    kinds = {p.name.split("-", 1)[0] for p in files}
    assert {"namespace", "job", "deployment", "node"} <= kinds
    for path in files:
        for resource in resources_from_file(str(path)):
            assert_strict_valid(resource)
