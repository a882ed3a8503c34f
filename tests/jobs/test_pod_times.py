"""Simulated pod events and log lines carry the job's real times (issue 29 §2).

A simulated cluster's clock runs ``SIMULATED_TIME_SCALE`` times faster than the wall clock (60 × in
the demo, ``config/settings/local.py``) from its first use, and the demo backdates its jobs; the raw
stamps of its events and log lines are therefore hours away from the job's start. The report maps
them onto the job's lifecycle (``apps.clusters.pod_report.SimulatedClock``); the page prints them in
the platform's time zone."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from apps.clusters.connections import backend_for
from apps.clusters.pod_report import SimulatedClock, job_pod_report
from apps.clusters.pusher import push_job_run
from apps.inventory.models import Cluster
from apps.jobs.models import Allocation, Job
from apps.scheduling import lifecycle
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

UTC = dt.UTC
STAMP = re.compile(r"^(\S+) \[simulated\] ", re.M)


def test_the_clock_interpolates_between_the_jobs_start_and_end_and_scales_outside():
    sim0 = dt.datetime(2025, 1, 1, 0, 0, tzinfo=UTC)
    real0 = dt.datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
    clock = SimulatedClock(sim0, real0, time_scale=60.0)
    assert clock.real(sim0) == real0
    assert clock.real(sim0 + dt.timedelta(hours=1)) == real0 + dt.timedelta(minutes=1)  # 60 × faster
    assert clock.real(sim0 - dt.timedelta(seconds=120)) == real0 - dt.timedelta(seconds=2)
    assert clock.real(None) is None
    ended = SimulatedClock(
        sim0, real0, 60.0, sim_end=sim0 + dt.timedelta(minutes=10), real_end=real0 + dt.timedelta(hours=5)
    )
    assert ended.real(sim0 + dt.timedelta(minutes=5)) == real0 + dt.timedelta(hours=2, minutes=30)
    assert ended.real(sim0 + dt.timedelta(minutes=10)) == real0 + dt.timedelta(hours=5)
    assert ended.real(sim0 + dt.timedelta(minutes=11)) == real0 + dt.timedelta(hours=5, seconds=1)
    text = "2025-01-01T00:05:00Z [simulated] main: step 30 loss=1.0\nnot a simulated line\n"
    with timezone.override("Asia/Shanghai"):
        assert ended.log(text) == (
            "2026-12-03T11:30:00+08:00 [simulated] main: step 30 loss=1.0\nnot a simulated line\n"
        )


@pytest.fixture
def running(settings, fleet, member_project, a100):
    """A job running on the simulated cluster at the demo's time scale, backdated like the demo's
    jobs: started 5 h ago, submitted 5 h 10 min ago."""
    settings.SUANCHI = {**settings.SUANCHI, "SIMULATED_TIME_SCALE": 60.0}
    user, project = member_project
    job = submit_whole_cards(
        project, user, a100, name="train", image="pytorch:2.3", expected_duration_s=86400
    )
    assert job.pk in scheduling_cycle_run().placed_job_ids
    assert push_job_run(job_id=job.pk)["failed"] == 0
    backend = backend_for(Cluster.objects.get(slug="prod"))
    backend.advance(600)  # ten simulated minutes: the pod started and wrote its lines
    job.refresh_from_db()
    assert lifecycle.job_to_running(job=job, actor="reconciler")
    now = timezone.now()
    started = now - dt.timedelta(hours=5)
    Job.objects.filter(pk=job.pk).update(created_at=started - dt.timedelta(minutes=10), started_at=started)
    Allocation.objects.filter(job=job).update(started_at=started - dt.timedelta(seconds=20))
    job.refresh_from_db()
    return job, backend


def test_events_and_log_lines_lie_within_the_jobs_real_run(running):
    job, backend = running
    report = job_pod_report(job)
    assert report.simulated and report.events and report.log, report
    now = timezone.now()
    started = job.started_at
    for event in report.events:
        assert started - dt.timedelta(minutes=1) <= event["at"] <= now, event
    by_reason = {e["reason"]: e["at"] for e in report.events}
    assert abs(by_reason["Started"] - started) < dt.timedelta(seconds=1)  # the job's own start
    assert by_reason["Scheduled"] <= by_reason["Started"]
    stamps = [dt.datetime.fromisoformat(s) for s in STAMP.findall(report.log)]
    assert len(stamps) >= 10
    assert all(s.utcoffset() == dt.timedelta(hours=8) for s in stamps)  # the platform's zone
    assert all(started <= s <= now for s in stamps), (started, stamps[0], stamps[-1], now)
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] > dt.timedelta(hours=1)
    # What the simulator itself stamps is hours away: the mapping is what makes it right.
    raw = STAMP.findall(backend.pod_log(*_log_args(backend, job)))
    assert raw and all(
        abs(dt.datetime.fromisoformat(r.replace("Z", "+00:00")) - started) > dt.timedelta(hours=4)
        for r in raw
    )


def _log_args(backend, job):
    ns = job.project.namespace or job.project.slug
    pods = backend.list_owned("Pod", ns)
    return ns, pods[0]["metadata"]["name"]


def test_the_page_prints_them_in_the_platform_time_zone(client, running, member_project):
    job, _backend = running
    client.force_login(member_project[0])
    body = client.get(f"/jobs/{job.pk}/pod/").content.decode()
    started_local = timezone.localtime(job.started_at)
    started_cell = re.search(
        r'<time datetime="([^"]+)">[^<]*</time></td><td>Normal</td><td class="mono">Started', body
    )
    assert started_cell, body
    shown = dt.datetime.fromisoformat(started_cell.group(1))
    assert (
        abs(shown - job.started_at) < dt.timedelta(seconds=1)
        and shown.utcoffset() == started_local.utcoffset()
    )
    assert started_local.strftime("%Y-%m-%dT%H") in body  # a log line of the job's first hour
