"""Fleet rollups (issue 20): written at ingest in the rollups' transaction, idempotent, backfilled by
the migration, and the fleet report computed from them equals the report computed from card rollups."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.catalog.models import DeviceModel
from apps.inventory.models import Device
from apps.telemetry import ingest, rollups, selectors, windows
from apps.telemetry.models import FleetRollup, Quality
from apps.telemetry.samples import Sample

GROUPINGS = ["vendor", "model", "pool", "node", "cluster"]


def _fleet_table():
    return sorted(
        FleetRollup.objects.values_list(
            "resolution",
            "window_start",
            "source",
            "node_id",
            "vendor",
            "model_label",
            "cards",
            "estimated",
            "util_sum",
            "util_n",
            "util_max",
        )
    )


def _report(user, period):
    return {
        "fleet": {g: selectors.fleet_utilization(user=user, period=period, group_by=g) for g in GROUPINGS},
        "three": selectors.three_figures(user=user, period=period),
        "top": selectors.top_nodes(user=user, period=period),
        "idle": selectors.idle_cards(user=user, period=period),
    }


def _util(i: int, k: int) -> float:
    return float((i * 17 + k * 7) % 100) if i != 1 else 2.0  # card 1 (gpu-01/1) idle


def _samples(devices, start, end, util, step=timedelta(seconds=30)):
    out, t, k = [], start, 0
    while t < end:
        for i, d in enumerate(devices):
            out.append(Sample(at=t, device_id=d.pk, utilization_pct=util(i, k)))
        t += step
        k += 1
    return out


@pytest.fixture
def mixed(ledger, staff_user):
    """Two hours and a bit of samples on every card of a mixed fleet (five vendors, a catalogue model
    on two cards, raw names elsewhere), one card estimated, a retired and a lost card with history."""
    d = ledger["devices"]
    a100 = DeviceModel.objects.create(vendor="nvidia", kind="gpu", name="A100", slug="a100", memory_mib=81920)
    Device.objects.filter(pk__in=[d["gpu-01/0"].pk, d["gpu-01/1"].pk]).update(device_model=a100)
    Device.objects.filter(pk=d["npu-01/0"].pk).update(raw_model_name="Ascend 910B")
    now = timezone.now().replace(second=0, microsecond=0)
    end = now - timedelta(minutes=now.minute % 5)
    start = end - timedelta(hours=2, minutes=10)
    exact = [v for k, v in d.items() if k != "mlu-01/0"]
    ingest.samples_ingest(
        samples=_samples(exact, start, end, _util),
        source="t",
        scrape_interval_s=30,
    )
    ingest.samples_ingest(
        samples=_samples([d["mlu-01/0"]], start, end, lambda i, k: 55.5),
        source="t",
        quality=Quality.ESTIMATED,
        scrape_interval_s=30,
    )
    Device.objects.filter(pk=d["amd-01/0"].pk).update(health=Device.Health.RETIRED)
    Device.objects.filter(pk=d["dcu-01/0"].pk).update(health=Device.Health.LOST)
    return {"devices": d, "start": start, "end": end, "staff": staff_user, "exact": exact}


def _periods(scene):
    return [
        selectors.period_parse(None, None),  # the page's default: the last 24 h, 5-minute rows
        selectors.period_parse(scene["start"] + timedelta(minutes=20), scene["end"] - timedelta(minutes=35)),
        selectors.period_parse(scene["end"] - timedelta(days=3), scene["end"]),  # hourly rows
    ]


def test_the_report_from_fleet_rollups_equals_the_report_from_card_rollups(mixed, monkeypatch):
    user, periods = mixed["staff"], _periods(mixed)
    new = [_report(user, p) for p in periods]
    assert FleetRollup.objects.filter(resolution=windows.WINDOW_S).exists()
    assert FleetRollup.objects.filter(resolution=windows.HOUR_S).exists()
    assert new[0]["three"]["cards_with_telemetry"] == 6  # 8 cards, a retired and a lost one
    assert {s["group"] for s in new[0]["fleet"]["model"]["series"]} >= {"A100", "Ascend 910B", ""}
    assert any(
        p["quality"] == Quality.ESTIMATED for s in new[0]["fleet"]["vendor"]["series"] for p in s["points"]
    )
    assert new[0]["idle"] and new[0]["top"]
    monkeypatch.setattr(selectors.fleet, "_fleet_rows", lambda period, source: None)  # the card rollups' way
    assert [_report(user, p) for p in periods] == new


def test_ingesting_a_window_again_changes_nothing_and_later_samples_are_counted(mixed, monkeypatch):
    user, d = mixed["staff"], mixed["devices"]
    before = _fleet_table()
    last = mixed["end"] - timedelta(minutes=5)
    # The same samples of the last window once more (a retried scrape).
    again = [s for s in _samples(mixed["exact"], mixed["start"], mixed["end"], _util) if s.at >= last]
    assert len(again) == 10 * len(mixed["exact"])
    ingest.samples_ingest(samples=again, source="t", scrape_interval_s=30)
    assert _fleet_table() == before
    # A sample of the next window on one card: its node's rows follow, no other node's.
    late = [Sample(at=mixed["end"] + timedelta(seconds=5), device_id=d["gpu-02/0"].pk, utilization_pct=99.0)]
    ingest.samples_ingest(samples=late, source="t", scrape_interval_s=30)
    after = _fleet_table()
    assert after != before
    changed = [r for r in after if r not in before]
    assert {(r[0], r[3]) for r in changed} == {
        (windows.WINDOW_S, d["gpu-02/0"].node_id),
        (windows.HOUR_S, d["gpu-02/0"].node_id),
    }
    period = _periods(mixed)[0]
    new = _report(user, period)
    monkeypatch.setattr(selectors.fleet, "_fleet_rows", lambda period, source: None)
    assert _report(user, period) == new


def test_the_migration_backfill_and_a_rebuild_give_the_rows_ingest_wrote(mixed):
    written = _fleet_table()
    assert written
    migration = importlib.import_module("apps.telemetry.migrations.0005_fleet_rollup")
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM telemetry_fleetrollup")
        cursor.execute(migration.BACKFILL_SQL)
    assert _fleet_table() == written
    FleetRollup.objects.all().delete()
    for resolution in (windows.WINDOW_S, windows.HOUR_S):
        rollups.fleet_rollups_rebuild(resolution=resolution)
    assert _fleet_table() == written


def test_two_sources_in_the_period_do_not_count_a_card_twice(mixed):
    d, user = mixed["devices"], mixed["staff"]
    start = mixed["end"] - timedelta(minutes=30)
    ingest.samples_ingest(
        samples=_samples([d["gpu-01/0"]], start, mixed["end"], lambda i, k: 10.0),
        source="other",
        scrape_interval_s=30,
    )
    period = selectors.period_parse(None, None)
    three = selectors.three_figures(user=user, period=period)
    assert three["cards_with_telemetry"] == 6
    fleet = selectors.fleet_utilization(user=user, period=period, group_by="node")
    gpu01 = next(s for s in fleet["series"] if s["group"] == "gpu-01")
    assert {p["cards"] for p in gpu01["points"]} == {2}  # gpu-01/0 from two sources: still one card
    assert selectors.three_figures(user=user, period=period, source="other")["cards_with_telemetry"] == 1


def test_purge_drops_fleet_rows_past_retention(mixed):
    assert FleetRollup.objects.exists()
    rollups.rollups_purge(now=timezone.now() + timedelta(days=500))
    assert not FleetRollup.objects.exists()
