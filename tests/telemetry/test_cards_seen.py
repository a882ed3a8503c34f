"""Cards with telemetry (issue 31): taken from the fleet totals where every in-service card reported
in one window, else counted from the cards' rows of the period; the same figure either way."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.inventory.models import Device
from apps.telemetry import ingest, selectors
from apps.telemetry.selectors import fleet
from tests.telemetry import test_fleet_rollups
from tests.telemetry.test_fleet_rollups import _report, _samples, _util

mixed = test_fleet_rollups.mixed  # the fleet rollups' scene (a fixture)


def _distinct_queries(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "COUNT(DISTINCT" in q["sql"].upper()]


def test_a_fleet_whose_cards_all_report_takes_the_count_from_the_totals(mixed):
    period = selectors.period_parse(None, None)
    with CaptureQueriesContext(connection) as queries:
        three = selectors.three_figures(user=mixed["staff"], period=period)
    # 8 cards, all reporting; a retired and a lost one are not in service.
    assert three["cards"] == three["cards_with_telemetry"] == 6
    assert fleet._cards_counted(period, None) == 6
    assert not _distinct_queries(queries)


def test_a_silent_card_is_counted_out_and_the_rows_are_counted(mixed, monkeypatch):
    d = mixed["devices"]["gpu-01/0"]
    Device.objects.create(node=d.node, vendor=d.vendor, index=7, uuid="GPU-silent", memory_mib=81920)
    period = selectors.period_parse(None, None)
    with CaptureQueriesContext(connection) as queries:
        new = _report(mixed["staff"], period)
    assert new["three"]["cards"] == 7
    assert new["three"]["cards_with_telemetry"] == 6
    assert _distinct_queries(queries)
    monkeypatch.setattr(selectors.fleet, "_fleet_rows", lambda period, source: None)  # the card rollups' way
    assert _report(mixed["staff"], period) == new


def test_cards_reporting_in_different_windows_are_all_counted(ledger, staff_user, monkeypatch):
    """No window has every card, the period has: the count over the period, not the busiest window's."""
    cards = list(ledger["devices"].values())
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(minutes=now.minute % 5) - timedelta(hours=1)
    half = len(cards) // 2
    for part, at in ((cards[:half], start), (cards[half:], start + timedelta(minutes=5))):
        ingest.samples_ingest(
            samples=_samples(part, at, at + timedelta(minutes=5), _util), source="t", scrape_interval_s=30
        )
    period = selectors.period_parse(None, None)
    new = _report(staff_user, period)
    assert new["three"]["cards_with_telemetry"] == new["three"]["cards"] == len(cards) == 8
    per_window: dict[str, int] = {}
    for series in new["fleet"]["vendor"]["series"]:
        for point in series["points"]:
            per_window[point["window_start"]] = per_window.get(point["window_start"], 0) + point["cards"]
    assert sorted(per_window.values()) == [4, 4]  # no window with all 8
    monkeypatch.setattr(selectors.fleet, "_fleet_rows", lambda period, source: None)
    assert _report(staff_user, period) == new
