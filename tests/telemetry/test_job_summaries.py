"""Job summaries (issue 31): per hour (UTC), source and project, the job utilization rows summed,
rebuilt by the attribution that writes those rows; the fleet report's effective utilization and the
members' project figures read the whole hours of a period from them and the edges from the rows, and
give what the rows alone give."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.contrib import admin
from django.db import connection
from django.utils import timezone

from apps.telemetry import attribution, ingest, rollups, selectors
from apps.telemetry.models import JobSummary, JobUtilization, Quality
from apps.telemetry.samples import Sample
from apps.telemetry.selectors.periods import _job_sums, _job_totals
from tests.fixtures.telemetry import allocate, make_job

pytestmark = pytest.mark.django_db


def _samples(devices, start, end, source_shift=0.0):
    out, t, i = [], start, 0
    while t < end:
        for k, device in enumerate(devices):
            out.append(
                Sample(at=t, device_id=device.pk, utilization_pct=(i * 7 + k * 13) % 90 + source_shift)
            )
        t += timedelta(seconds=30)
        i += 1
    return out


@pytest.fixture
def scene(ledger, make_user, make_project, staff_user):
    """Two hours and a bit of samples from two sources; two projects share one card (estimated rows),
    one holds another card from the middle on, a third card is idle and unallocated."""
    now = timezone.now().replace(second=0, microsecond=0)
    end = now - timedelta(minutes=now.minute % 5)
    start = end - timedelta(hours=2, minutes=10)
    d = ledger["devices"]
    alice = make_user("alice")
    vision, other = make_project("vision", members=[alice]), make_project("other")
    train, shared, late = make_job(vision, "train"), make_job(other, "shared"), make_job(other, "late")
    allocate(train, d["gpu-01/0"], start=start, milli=500)
    allocate(shared, d["gpu-01/0"], start=start, milli=500)
    allocate(late, d["gpu-01/1"], start=start + timedelta(minutes=47, seconds=30))
    cards = [d["gpu-01/0"], d["gpu-01/1"], d["gpu-02/0"]]
    ingest.samples_ingest(samples=_samples(cards, start, end), source="t", scrape_interval_s=30)
    ingest.samples_ingest(samples=_samples(cards[:1], start, end, 5.0), source="u", scrape_interval_s=30)
    return {"start": start, "end": end, "staff": staff_user, "alice": alice, "projects": [vision, other]}


def _periods(scene):
    end, hour = scene["end"], scene["end"].replace(minute=0)
    return [
        selectors.period_parse(None, None),  # the page's default: the last 24 h
        selectors.period_parse(None, None, default_hours=24 * 7),  # the members' page
        selectors.period_parse(hour - timedelta(hours=2), hour),  # whole hours only, no edges
        selectors.period_parse(hour - timedelta(hours=1, minutes=25), end),  # edges on both sides
        selectors.period_parse(end - timedelta(minutes=20), end),  # inside one hour: no whole bucket
        selectors.period_parse(scene["start"] + timedelta(minutes=3), end - timedelta(minutes=61)),
    ]


def _from_rows(period, **filters):
    """The reference: the period's job utilization rows summed straight."""
    rows = JobUtilization.objects.filter(
        window_start__gte=period.start, window_start__lt=period.end, **filters
    )
    return {key: value or 0 for key, value in _job_sums(rows).items()}


def _same(a: dict, b: dict) -> None:
    # Σ in another order: equal to the last bits of a float (the reports round to 0.01).
    assert a == {key: pytest.approx(value, rel=1e-12) for key, value in b.items()}


def _table():
    return sorted(
        JobSummary.objects.values_list(
            "bucket_start", "source", "project_id_snapshot", "row_count", "estimated", "busy_sum", "share_sum"
        )
    )


def test_the_period_sums_from_summaries_equal_the_sums_from_rows(scene):
    vision, other = scene["projects"]
    assert JobSummary.objects.filter(source="u").exists()
    assert JobUtilization.objects.filter(quality=Quality.ESTIMATED).exists()
    for period in _periods(scene):
        reference = _from_rows(period)
        assert reference["rows"]
        _same(_job_totals(period), reference)
        _same(_job_totals(period, source="u"), _from_rows(period, source="u"))
        for project in (vision, other):
            _same(
                _job_totals(period, project_id=project.pk), _from_rows(period, project_id_snapshot=project.pk)
            )
        three = selectors.three_figures(user=scene["staff"], period=period)
        assert three["effective_utilization_pct"] == round(
            min(100.0, reference["busy"] / reference["share"]), 2
        )
        summaries = dict(selectors.project_summaries(user=scene["staff"], period=period))
        detailed = selectors.project_utilization(user=scene["staff"], pk=other.pk, period=period)
        assert {k: v for k, v in detailed.items() if k not in ("points", "jobs")} == summaries[other]


def test_the_report_reads_the_whole_hours_from_the_summaries(scene):
    """A summary that disagreed with its rows would show: the report reads it, not the rows."""
    user, hour = scene["staff"], scene["end"].replace(minute=0)
    period = selectors.period_parse(hour - timedelta(hours=2), hour)
    before = selectors.three_figures(user=user, period=period)["effective_utilization_pct"]
    assert before is not None
    JobSummary.objects.update(busy_sum=0)
    assert selectors.three_figures(user=user, period=period)["effective_utilization_pct"] == 0
    JobSummary.objects.all().delete()
    assert selectors.three_figures(user=user, period=period)["effective_utilization_pct"] is None
    (member_row,) = selectors.project_summaries(user=scene["alice"], period=period)
    assert member_row[1]["quality"] is None and member_row[1]["card_hours"] == 0


def test_ingest_again_changes_nothing_and_a_late_sample_rebuilds_its_hour_only(scene, ledger):
    before = _table()
    card = ledger["devices"]["gpu-01/1"]
    last = scene["end"] - timedelta(minutes=5)
    again = [
        s
        for s in _samples(
            [ledger["devices"][k] for k in ("gpu-01/0", "gpu-01/1", "gpu-02/0")], scene["start"], scene["end"]
        )
        if s.at >= last
    ]
    ingest.samples_ingest(samples=again, source="t", scrape_interval_s=30)
    assert _table() == before
    late = [Sample(at=scene["end"] + timedelta(seconds=5), device_id=card.pk, utilization_pct=99.0)]
    ingest.samples_ingest(samples=late, source="t", scrape_interval_s=30)
    changed = {(r[0], r[1]) for r in set(_table()) ^ set(before)}
    end_hour = scene["end"].replace(minute=0)
    assert changed == {(end_hour, "t")}


def test_the_migration_backfill_and_a_rebuild_give_the_rows_attribution_wrote(scene):
    written = _table()
    assert written
    migration = importlib.import_module("apps.telemetry.migrations.0007_job_summary_fleet_total")
    with connection.schema_editor() as editor:
        migration.backfill(None, editor)
    assert _table() == written
    JobSummary.objects.all().delete()
    attribution.job_summaries_rebuild()
    assert _table() == written


def test_purge_drops_summaries_past_retention(scene):
    rollups.rollups_purge(now=timezone.now() + timedelta(days=20))
    assert JobSummary.objects.exists()
    rollups.rollups_purge(now=timezone.now() + timedelta(days=500))
    assert not JobSummary.objects.exists() and not JobUtilization.objects.exists()


def test_purge_in_the_middle_of_an_hour_keeps_that_hour_equal_to_its_rows(scene):
    """The retention cut falls inside an hour: the rows after it stay, and so must their sum in that
    hour's summary (the report reads the hour whole from it)."""
    hour = scene["end"].replace(minute=0) - timedelta(hours=1)  # an hour wholly inside the scene
    cut = hour + timedelta(minutes=30)
    rollups.rollups_purge(now=cut + timedelta(days=400))  # TELEMETRY_HOURLY_RETENTION_DAYS' default
    period = selectors.period_parse(hour, hour + timedelta(hours=1))
    reference = _from_rows(period)
    assert reference["rows"]  # the rows from the cut on are kept
    _same(_job_totals(period), reference)


def test_rows_deleted_in_the_admin_leave_the_summaries_equal_to_the_rows(scene, rf):
    """The admin may delete job utilization rows (one, or a selection): the hours they were in are
    summed again, or the report would read what is gone."""
    rows_admin, request = admin.site._registry[JobUtilization], rf.post("/")
    request.user = scene["staff"]
    hour = scene["end"].replace(minute=0) - timedelta(hours=1)
    period = selectors.period_parse(hour, hour + timedelta(hours=1))
    rows_admin.delete_queryset(
        request,
        JobUtilization.objects.filter(window_start__gte=hour, window_start__lt=hour + timedelta(minutes=30)),
    )
    rows_admin.delete_model(
        request, JobUtilization.objects.filter(window_start__gte=hour, source="u").first()
    )
    reference = _from_rows(period)
    assert reference["rows"]
    _same(_job_totals(period), reference)
