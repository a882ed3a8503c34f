"""Node summaries (issue 31): per node, source and bucket (an hour of 5-minute fleet rollups, a day of
hourly ones), rebuilt with the fleet rollups; the busiest nodes of the fleet report read the whole
buckets of a period from them and the edges from the fleet rollups, and give what the rollups give."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin

from apps.telemetry import rollups, selectors, windows
from apps.telemetry.models import DeviceRollup, NodeSummary
from tests.telemetry import _summary_checks, test_fleet_rollups
from tests.telemetry.test_card_summaries import _periods_with_edges

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
    _summary_checks.ingest_again_then_a_late_sample(mixed, _summary_table, key=lambda card: card.node_id)


def test_the_migration_backfill_and_a_rebuild_give_the_rows_ingest_wrote(mixed):
    written = _summary_checks.backfill_and_rebuild(
        _summary_table,
        NodeSummary,
        "apps.telemetry.migrations.0008_node_summary",
        rollups.node_summaries_rebuild,
    )
    NodeSummary.objects.all().delete()
    last = mixed["end"] - timedelta(minutes=5)  # the last window with rows: only its hour is rebuilt
    rollups.node_summaries_rebuild(resolution=windows.WINDOW_S, source="t", windows=[last])
    assert {r[1] for r in _summary_table()} == {last.replace(minute=0)}
    assert set(_summary_table()) < set(written)


def test_purge_drops_summaries_past_retention(mixed):
    _summary_checks.purge_past_retention(NodeSummary)


def test_purge_inside_a_day_keeps_that_day_equal_to_its_fleet_rollups(mixed, monkeypatch):
    user = mixed["staff"]

    def from_cards(period):  # the card rollups' way (the reference of the first test)
        with monkeypatch.context() as patched:
            patched.setattr(selectors.fleet, "_fleet_rows", lambda period, source: None)
            return _top(user, period)

    def same(reference, top):
        assert top == reference

    _summary_checks.purge_inside_a_day(mixed, from_cards, lambda period: _top(user, period), same)


def test_rollups_deleted_in_the_admin_leave_the_summaries_equal_to_the_rollups(mixed, monkeypatch, rf):
    """The admin may delete device rollups (one, or a selection): the fleet rollups, totals and node
    and card summaries of their windows are rebuilt, or the report would read what is gone."""
    rollup_admin, request = admin.site._registry[DeviceRollup], rf.post("/")
    request.user = mixed["staff"]
    hour = mixed["end"].replace(minute=0) - timedelta(hours=1)
    busiest = _top(mixed["staff"], selectors.period_parse(hour, hour + timedelta(hours=1)))[0]
    rollups_of = DeviceRollup.objects.filter(device__node_id=busiest["node_id"], window_start__gte=hour)
    # the one deleted on its own: the full hour's rollup (the current hour has none in its first minutes)
    one = rollups_of.filter(resolution=windows.HOUR_S, window_start=hour).first()
    assert one is not None
    selection = rollups_of.filter(window_start__lt=hour + timedelta(minutes=40)).exclude(pk=one.pk)
    rollup_admin.delete_queryset(request, selection)
    rollup_admin.delete_model(request, one)
    periods = _periods_with_edges(mixed)
    new = [(_top(mixed["staff"], p), selectors.three_figures(user=mixed["staff"], period=p)) for p in periods]
    monkeypatch.setattr(selectors.fleet, "_fleet_rows", lambda period, source: None)  # the card rollups' way
    assert [
        (_top(mixed["staff"], p), selectors.three_figures(user=mixed["staff"], period=p)) for p in periods
    ] == new
