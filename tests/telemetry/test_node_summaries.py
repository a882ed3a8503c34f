"""Node summaries (issue 31): per node, source and bucket (an hour of 5-minute fleet rollups, a day of
hourly ones), rebuilt with the fleet rollups; the busiest nodes of the fleet report read the whole
buckets of a period from them and the edges from the fleet rollups, and give what the rollups give."""

from __future__ import annotations

import importlib
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from apps.telemetry import ingest, rollups, selectors, windows
from apps.telemetry.models import NodeSummary
from apps.telemetry.samples import Sample
from tests.telemetry import test_fleet_rollups
from tests.telemetry.test_card_summaries import _periods_with_edges
from tests.telemetry.test_fleet_rollups import _samples, _util

mixed = test_fleet_rollups.mixed  # the fleet rollups' scene (a fixture)


def _summary_table():
    return sorted(
        NodeSummary.objects.values_list(
            "resolution", "bucket_start", "source", "node_id", "estimated", "util_sum", "util_n", "util_max"
        )
    )


def _top(user, period, source=None):
    return selectors.top_nodes(user=user, period=period, limit=3, source=source)


def test_the_busiest_nodes_from_summaries_equal_those_from_the_card_rollups(mixed, monkeypatch):
    assert NodeSummary.objects.filter(resolution=windows.WINDOW_S).exists()
    assert NodeSummary.objects.filter(resolution=windows.HOUR_S).exists()
    user, periods = mixed["staff"], _periods_with_edges(mixed)
    new = [(_top(user, p), _top(user, p, "t")) for p in periods]
    assert all(top for top, _ in new[:2])
    monkeypatch.setattr(selectors.fleet, "_fleet_rows", lambda period, source: None)  # the card rollups' way
    assert [(_top(user, p), _top(user, p, "t")) for p in periods] == new


def test_the_report_reads_the_whole_hours_from_the_summaries(mixed):
    """A summary that disagreed with its fleet rollups would show: the report reads it."""
    user = mixed["staff"]
    hour = mixed["end"].replace(minute=0)
    period = selectors.period_parse(hour - timedelta(hours=2), hour)
    before = _top(user, period)
    last = before[-1]
    NodeSummary.objects.filter(node_id=last["node_id"], resolution=windows.WINDOW_S).update(util_sum=0.0)
    after = _top(user, period)
    assert len(after) == 3
    assert last["node_id"] not in [r["node_id"] for r in after]  # its whole hours now read 0 % busy


def test_ingest_again_changes_nothing_and_a_late_sample_rebuilds_its_node_only(mixed):
    before = _summary_table()
    last = mixed["end"] - timedelta(minutes=5)
    again = [s for s in _samples(mixed["exact"], mixed["start"], mixed["end"], _util) if s.at >= last]
    ingest.samples_ingest(samples=again, source="t", scrape_interval_s=30)
    assert _summary_table() == before
    card = mixed["devices"]["gpu-02/0"]
    late = [Sample(at=mixed["end"] + timedelta(seconds=5), device_id=card.pk, utilization_pct=99.0)]
    ingest.samples_ingest(samples=late, source="t", scrape_interval_s=30)
    changed = {(r[0], r[3]) for r in set(_summary_table()) ^ set(before)}
    assert changed == {(windows.WINDOW_S, card.node_id), (windows.HOUR_S, card.node_id)}


def test_the_migration_backfill_and_a_rebuild_give_the_rows_ingest_wrote(mixed):
    written = _summary_table()
    assert written
    migration = importlib.import_module("apps.telemetry.migrations.0008_node_summary")
    with connection.schema_editor() as editor:
        migration.backfill(None, editor)
    assert _summary_table() == written
    NodeSummary.objects.all().delete()
    for resolution in (windows.WINDOW_S, windows.HOUR_S):
        rollups.node_summaries_rebuild(resolution=resolution)
    assert _summary_table() == written
    NodeSummary.objects.all().delete()
    last = mixed["end"] - timedelta(minutes=5)  # the last window with rows: only its hour is rebuilt
    rollups.node_summaries_rebuild(resolution=windows.WINDOW_S, source="t", windows=[last])
    assert {r[1] for r in _summary_table()} == {last.replace(minute=0)}
    assert set(_summary_table()) < set(written)


def test_purge_drops_summaries_past_retention(mixed):
    rollups.rollups_purge(now=timezone.now() + timedelta(days=20))
    assert not NodeSummary.objects.filter(resolution=windows.WINDOW_S).exists()
    assert NodeSummary.objects.filter(resolution=windows.HOUR_S).exists()
    rollups.rollups_purge(now=timezone.now() + timedelta(days=500))
    assert not NodeSummary.objects.exists()
