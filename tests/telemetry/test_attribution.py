"""Attribution of card utilization to jobs: exact with pod labels, estimated by time overlap and share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.telemetry import ingest
from apps.telemetry.models import JobUtilization, Quality
from apps.telemetry.samples import Sample
from tests.fixtures.telemetry import allocate, fixture_text, make_job

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
W0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)


@pytest.fixture
def vision(make_project):
    return make_project("vision")


def test_a_pod_labelled_series_of_the_only_allocation_is_exact(ledger, vision):
    device = ledger["devices"]["gpu-01/0"]
    job = make_job(vision)
    # The fixture's pod is suanchi-12-a0-...: give the job that id.
    job.__class__.objects.filter(pk=job.pk).update(id=12)
    job = job.__class__.objects.get(pk=12)
    allocate(job, device, start=NOW - timedelta(hours=1))
    ingest.scrape_ingest(text=fixture_text("dcgm.prom"), at=NOW - timedelta(minutes=2), now=NOW)
    (row,) = JobUtilization.objects.filter(job=job)
    assert (row.quality, row.share, row.busy_pct, row.mem_used_avg_mib) == (Quality.EXACT, 1.0, 87.0, 72000.0)
    assert row.project_id_snapshot == vision.pk


def test_without_pod_labels_it_is_estimated_by_overlap(ledger, vision):
    device = ledger["devices"]["gpu-01/1"]  # no pod labels in the fixture
    job = make_job(vision)
    # Held for the last 150 s of the 07:55 window.
    allocate(job, device, start=datetime(2026, 11, 29, 7, 57, 30, tzinfo=UTC))
    ingest.samples_ingest(
        samples=[
            Sample(at=datetime(2026, 11, 29, 7, 58, tzinfo=UTC), device_id=device.pk, utilization_pct=40.0)
        ],
        source="t",
        now=NOW,
    )
    (row,) = JobUtilization.objects.filter(job=job)
    assert row.quality == Quality.ESTIMATED
    assert row.share == pytest.approx(0.5)
    assert row.busy_pct == pytest.approx(40.0)  # all the card's busy goes to the one holder


def test_a_shared_card_is_split_by_share(ledger, vision, make_project):
    device = ledger["devices"]["gpu-01/0"]
    a = make_job(vision, "train")
    b = make_job(make_project("search"), "serve")
    allocate(a, device, start=W0 - timedelta(hours=1), milli=500, memory_mib=50 * 1024)
    allocate(b, device, start=W0 - timedelta(hours=1), milli=250, memory_mib=20 * 1024)
    samples = [
        Sample(at=W0 + timedelta(seconds=10 * k), device_id=device.pk, utilization_pct=60.0)
        for k in range(30)
    ]
    ingest.samples_ingest(samples=samples, source="t", now=NOW)
    rows = {r.job_id: r for r in JobUtilization.objects.all()}
    assert rows[a.pk].share == pytest.approx(0.5) and rows[b.pk].share == pytest.approx(0.25)
    assert rows[a.pk].busy_pct == pytest.approx(40.0) and rows[b.pk].busy_pct == pytest.approx(20.0)
    assert {r.quality for r in rows.values()} == {Quality.ESTIMATED}
    # Re-ingesting the window rebuilds the same rows (no double counting).
    ingest.samples_ingest(samples=samples, source="t", now=NOW)
    assert JobUtilization.objects.count() == 2
    assert sorted(JobUtilization.objects.values_list("busy_pct", flat=True)) == pytest.approx([20.0, 40.0])


def test_a_labelled_mig_instance_is_exact_and_the_unlabelled_one_goes_to_the_other_holder(ledger, vision):
    device = ledger["devices"]["gpu-02/0"]
    Job = make_job(vision, "placeholder").__class__
    serve = make_job(vision, "serve")
    Job.objects.filter(pk=serve.pk).update(id=15)  # the fixture's labelled pod is suanchi-15-...
    serve = Job.objects.get(pk=15)
    other = make_job(vision, "batch")
    allocate(
        serve, device, start=NOW - timedelta(hours=1), milli=428, profile="3g.40gb", memory_mib=40 * 1024
    )
    allocate(
        other, device, start=NOW - timedelta(hours=1), milli=428, profile="3g.40gb", memory_mib=40 * 1024
    )
    ingest.scrape_ingest(text=fixture_text("dcgm_mig.prom"), at=NOW - timedelta(minutes=2), now=NOW)
    exact = JobUtilization.objects.get(job=serve)
    assert exact.quality == Quality.EXACT
    assert exact.share == pytest.approx(0.428)
    assert exact.busy_pct / exact.share == pytest.approx(62.5)  # the labelled instance's busy %
    assert exact.mem_used_avg_mib == 30000.0
    estimated = JobUtilization.objects.get(job=other)
    assert estimated.quality == Quality.ESTIMATED
    assert estimated.busy_pct / estimated.share == pytest.approx(10.0)  # the unlabelled instance


def test_released_allocations_outside_the_window_get_nothing(ledger, vision):
    device = ledger["devices"]["gpu-01/1"]
    job = make_job(vision)
    allocate(job, device, start=W0 - timedelta(hours=2), end=W0 - timedelta(hours=1))
    ingest.samples_ingest(
        samples=[Sample(at=W0 + timedelta(seconds=30), device_id=device.pk, utilization_pct=90.0)],
        source="t",
        now=NOW,
    )
    assert not JobUtilization.objects.exists()
