"""Card summaries (issue 31): per card, source and bucket (an hour of 5-minute rollups, a day of hourly
ones), rebuilt with the fleet rollups; the fleet report's idle cards and cards with telemetry read the
whole buckets of a period from them and the edges from the rollups, and give what the rollups alone give."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count, Max, Q, Sum

from apps.inventory.models import Device
from apps.telemetry import rollups, selectors, windows
from apps.telemetry.models import CardSummary, FleetTotal, Quality
from apps.telemetry.selectors.periods import _card_period_sql, _card_rows
from tests.telemetry import _summary_checks, test_fleet_rollups
from tests.telemetry.test_fleet_rollups import _periods

mixed = test_fleet_rollups.mixed  # the fleet rollups' scene (a fixture)


def _summary_table():
    return sorted(
        CardSummary.objects.values_list(
            "resolution",
            "bucket_start",
            "source",
            "device_id",
            "row_count",
            "estimated",
            "util_sum",
            "util_n",
            "util_max",
        )
    )


def _periods_with_edges(scene):
    """The fleet test's periods, and others whose edges fall inside an hour or a day, or on one."""
    end = scene["end"]
    hour = end.replace(minute=0)
    return [
        *_periods(scene),
        selectors.period_parse(hour - timedelta(hours=2), hour),  # whole hours only, no edges
        selectors.period_parse(hour - timedelta(hours=1, minutes=25), end),  # edges on both sides
        selectors.period_parse(end - timedelta(minutes=20), end),  # inside one hour: no whole bucket
        selectors.period_parse(end - timedelta(days=5, minutes=7), end + timedelta(minutes=3)),  # hourly
    ]


def _per_card_from_rollups(period, source=None):
    """The reference: per card, its rollups of the period summed straight from the rollups."""
    return {
        r["device_id"]: (r["u_sum"], r["u_n"], r["peak"], r["estimated"])
        for r in _card_rows(period, source)
        .order_by()
        .values("device_id")
        .annotate(
            u_sum=Sum("util_sum"),
            u_n=Sum("util_n"),
            peak=Max("util_max"),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
    }


def _per_card_from_summaries(period, source=None):
    sql, params = _card_period_sql(period, source)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {d: (s, int(n), peak, int(e)) for d, s, n, peak, e in cursor.fetchall()}


def _idle_from_rollups(period, threshold=5.0):
    """The idle cards as the report computed them before the summaries (node, index order)."""
    cards = (
        _card_rows(period)
        .values("device_id", "device__node__name", "device__index")
        .annotate(u_n=Sum("util_n"), peak=Max("util_max"))
        .filter(u_n__gt=0, peak__lte=threshold)
        .exclude(device__health=Device.Health.RETIRED)
        .order_by("device__node__name", "device__index")
    )
    return [r["device_id"] for r in cards]


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for device_id, (u_sum, u_n, peak, estimated) in a.items():
        # Σ in another order: equal to the last bits of a float (the report rounds to 0.01).
        assert b[device_id] == (pytest.approx(u_sum, rel=1e-12), u_n, peak, estimated)


def test_the_period_sums_from_summaries_equal_the_sums_from_rollups(mixed):
    assert CardSummary.objects.filter(resolution=windows.WINDOW_S).exists()
    assert CardSummary.objects.filter(resolution=windows.HOUR_S).exists()
    periods = _periods_with_edges(mixed)
    for period in periods:
        reference = _per_card_from_rollups(period)
        assert reference or period.end < mixed["start"]
        _same(reference, _per_card_from_summaries(period))
        _same(_per_card_from_rollups(period, "t"), _per_card_from_summaries(period, "t"))
        idle = selectors.idle_cards(user=mixed["staff"], period=period)
        assert [r["device_id"] for r in idle] == _idle_from_rollups(period)
        three = selectors.three_figures(user=mixed["staff"], period=period)
        in_service = Device.objects.exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST])
        assert three["cards_with_telemetry"] == len(
            set(reference) & set(in_service.values_list("pk", flat=True))
        )
    assert selectors.idle_cards(user=mixed["staff"], period=periods[0])  # card gpu-01/1 is idle


def test_the_report_reads_the_whole_hours_from_the_summaries(mixed):
    """A summary that disagreed with its rollups would show: the report reads it, not the rollups."""
    user, idle_card = mixed["staff"], mixed["devices"]["gpu-01/1"]
    hour = mixed["end"].replace(minute=0)
    period = selectors.period_parse(hour - timedelta(hours=2), hour)
    assert [r["device_id"] for r in selectors.idle_cards(user=user, period=period)] == [idle_card.pk]
    CardSummary.objects.filter(device=idle_card, resolution=windows.WINDOW_S).update(util_max=50.0)
    assert selectors.idle_cards(user=user, period=period) == []
    CardSummary.objects.filter(resolution=windows.WINDOW_S).delete()
    # Where the fleet totals show every in-service card in one window, the count is taken from them
    # (test_cards_seen); without them, it is counted from the summaries.
    assert selectors.three_figures(user=user, period=period)["cards_with_telemetry"] == 6
    FleetTotal.objects.all().delete()
    assert selectors.three_figures(user=user, period=period)["cards_with_telemetry"] == 0


def test_ingest_again_changes_nothing_and_a_late_sample_rebuilds_its_card_only(mixed):
    _summary_checks.ingest_again_then_a_late_sample(mixed, _summary_table, key=lambda card: card.pk)


def test_the_migration_backfill_and_a_rebuild_give_the_rows_ingest_wrote(mixed):
    _summary_checks.backfill_and_rebuild(
        _summary_table,
        CardSummary,
        "apps.telemetry.migrations.0006_card_summary",
        rollups.card_summaries_rebuild,
    )


def test_purge_drops_summaries_past_retention(mixed):
    _summary_checks.purge_past_retention(CardSummary)


def test_purge_inside_a_day_keeps_that_day_equal_to_its_rollups(mixed):
    _summary_checks.purge_inside_a_day(mixed, _per_card_from_rollups, _per_card_from_summaries, _same)
