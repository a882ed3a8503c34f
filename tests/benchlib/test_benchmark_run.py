"""Issue 22: a benchmark run is a job the platform schedules; on the simulated cluster (the demo's) it
runs, ends, reports a synthetic figure and appears in the library and in recommendations."""

from __future__ import annotations

from apps.benchlib.models import Measurement
from apps.benchlib.recommend import recommend
from apps.catalog.models import WorkloadProfile
from apps.catalog.workloads import workload_profile_sync
from apps.clusters.connections import backend_for
from apps.inventory.models import Cluster
from apps.jobs.models import JobState
from apps.scheduling.reconcile import reconcile_cluster
from tests.kube.test_reconcile import schedule_and_push, submit


def test_a_benchmark_run_schedules_runs_reports_and_lands_in_the_library(fleet, member_project, a100):
    workload_profile_sync(actor="test")
    profile = WorkloadProfile.objects.get(key="resnet50-infer")
    user, project = member_project
    job = schedule_and_push(
        submit(
            project,
            user,
            a100,
            name="bench",
            kind="benchmark",
            workload_profile=profile,
            expected_duration_s=60,
        )
    )
    cluster = Cluster.objects.get(slug="prod")
    backend = backend_for(cluster)
    assert backend.name == "simulated"
    backend.advance(6)
    reconcile_cluster(cluster=cluster)
    assert not Measurement.objects.exists()  # nothing before the run ends
    backend.advance(120)
    reconcile_cluster(cluster=cluster)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    (m,) = Measurement.objects.all()
    assert m.job == job and m.synthetic and m.source == "benchmark" and m.device_model == a100
    reconcile_cluster(cluster=cluster)  # seeing the end again adds nothing
    assert Measurement.objects.count() == 1
    answer = recommend(profile=profile, target=1000)
    whole = next(o for o in answer.options if o.device_model == a100 and o.template is None)
    assert whole.basis == "measured" and whole.evidence.measurements == [m.pk] and whole.evidence.synthetic


def test_benchmark_submit_starts_one_run_per_model_and_refuses_unknown_input(
    fleet, member_project, a100, ascend
):
    import json
    from io import StringIO

    import pytest
    from django.core.management import CommandError, call_command

    from apps.jobs.models import Job

    workload_profile_sync(actor="test")
    _user, project = member_project
    out = StringIO()
    call_command(
        "benchmark_submit",
        "--profile",
        "resnet50-infer",
        "--project",
        project.slug,
        "--per-model",
        "--json",
        stdout=out,
    )
    answer = json.loads(out.getvalue())
    jobs = Job.objects.filter(kind="benchmark")
    assert {j.device_model for j in jobs} == {a100, ascend} and len(answer["submitted"]) == 2
    assert all(j.workload_profile.key == "resnet50-infer" for j in jobs)
    with pytest.raises(CommandError):
        call_command("benchmark_submit", "--profile", "nope", "--project", project.slug, "--per-model")
    with pytest.raises(CommandError):
        call_command(
            "benchmark_submit", "--profile", "resnet50-infer", "--project", project.slug, "--batch", "ghost"
        )
    assert Job.objects.filter(kind="benchmark").count() == 2
