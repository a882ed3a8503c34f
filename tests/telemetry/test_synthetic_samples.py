"""Simulated clusters emit synthetic utilization through the real ingestion path."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.services import scheduling_cycle_run
from apps.telemetry.models import DeviceRollup, JobUtilization
from apps.telemetry.synthetic_samples import simulated_telemetry_emit
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def test_running_jobs_make_their_cards_busy_and_the_rest_idle(fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(project, user, a100)
    scheduling_cycle_run()
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    busy_card = Allocation.objects.get(job=job).device_id
    now = timezone.now().replace(second=30, microsecond=0)

    report = simulated_telemetry_emit(now=now)["prod"]
    assert report["used"] == 16 * 6  # 16 cards × six 10-second samples
    rows = DeviceRollup.objects.filter(source="simulated:prod", resolution=300)
    assert rows.filter(quality="estimated").count() == rows.count() >= 16
    # The minute may straddle two 5-minute windows: look at every window of the card.
    busy = list(rows.filter(device_id=busy_card))
    assert busy and all(40 <= r.util_avg <= 100 for r in busy)
    assert max(r.util_avg for r in rows.exclude(device_id=busy_card)) < 5
    ju = JobUtilization.objects.filter(job=job, device_id=busy_card)
    # Attributed to the job through its pod; synthetic data stays marked estimated.
    assert ju.count() >= 1 and {u.quality for u in ju} == {"estimated"}
    assert all(u.busy_pct > 30 for u in ju)

    # The same minute again changes nothing (the 10-second grid repeats).
    before = sorted(rows.values_list("device_id", "util_n", "util_sum"))
    simulated_telemetry_emit(now=now + dt.timedelta(seconds=5))
    assert sorted(rows.values_list("device_id", "util_n", "util_sum")) == before


def test_the_job_page_shows_the_utilization_curve(client, fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(project, user, a100)
    client.force_login(user)
    assert "job-utilization-chart" not in client.get(f"/jobs/{job.pk}/").content.decode()
    scheduling_cycle_run()
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    simulated_telemetry_emit()
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "job-utilization-chart" in page and f"/telemetry/jobs/{job.pk}/" in page
