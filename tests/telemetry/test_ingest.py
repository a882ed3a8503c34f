"""samples_ingest and scrape_ingest: matching, rollups, idempotency, counters, bad input, health events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import DataError

from apps.core.errors import ParseFailed, ValidationFailed
from apps.inventory.models import DeviceEvent
from apps.telemetry import ingest, rollups
from apps.telemetry.models import DeviceRollup, Quality
from apps.telemetry.samples import Sample
from tests.fixtures.telemetry import fixture_text

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
W0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)


def five(device, **filters):
    return DeviceRollup.objects.get(device=device, resolution=300, **filters)


def test_every_exporter_fixture_lands_on_its_ledger_card(ledger):
    at = NOW - timedelta(minutes=3)
    for name in ("dcgm.prom", "dcgm_mig.prom", "amd.prom", "hygon.prom", "cambricon.prom"):
        report, _ = ingest.scrape_ingest(text=fixture_text(name), at=at, now=NOW)
        assert report.skipped.get("device_not_in_ledger", 0) == 0, report.as_dict()
    d = ledger["devices"]
    gpu0 = five(d["gpu-01/0"])
    assert (gpu0.util_avg, gpu0.util_max, gpu0.mem_used_avg_mib, gpu0.mem_total_mib) == (
        87.0,
        87.0,
        72000.0,
        81559.0,
    )
    assert (gpu0.temp_max_c, gpu0.power_avg_w, gpu0.sample_count) == (64.0, 612.48, 1)
    assert gpu0.pods == [{"namespace": "vision", "pod": "suanchi-12-a0-x7k2p"}]
    assert gpu0.quality == Quality.EXACT and gpu0.source == "exporter"
    assert gpu0.window_start == datetime(2026, 11, 29, 7, 55, tzinfo=UTC)
    assert five(d["gpu-01/1"]).util_avg == 0.0
    mig = {r.partition: r.util_avg for r in DeviceRollup.objects.filter(device=d["gpu-02/0"], resolution=300)}
    assert mig == {"3g.40gb/1": 62.5, "3g.40gb/2": 10.0}
    assert five(d["amd-01/0"]).util_avg == 73.0  # matched by serial
    assert five(d["dcu-01/0"]).mem_used_avg_mib == 32768.0  # serial (device_id)
    assert five(d["mlu-01/0"]).mem_total_mib == 49152.0  # uuid
    # Hourly rows mirror the 5-minute rows.
    hourly = DeviceRollup.objects.get(device=d["gpu-01/0"], resolution=3600)
    assert (hourly.window_start, hourly.util_avg, hourly.sample_count) == (
        datetime(2026, 11, 29, 7, 0, tzinfo=UTC),
        87.0,
        1,
    )


def test_ascend_samples_keep_their_own_timestamps(ledger):
    # The fixture's samples are stamped 2025-11-29 07:06:40 UTC (1764400000000 ms).
    now = datetime(2025, 11, 29, 7, 10, tzinfo=UTC)
    report, _ = ingest.scrape_ingest(text=fixture_text("ascend.prom"), at=now, now=now)
    assert report.used == 2
    row = five(ledger["devices"]["npu-01/1"])
    assert row.window_start == datetime(2025, 11, 29, 7, 5, tzinfo=UTC)
    assert row.first_sample_at == datetime(2025, 11, 29, 7, 6, 40, tzinfo=UTC)
    assert (row.util_avg, row.mem_used_avg_mib, row.mem_total_mib) == (98.0, 60000.0, 65536.0)


def test_matching_by_pci_bus_id_and_by_node_index(ledger):
    d = ledger["devices"]
    samples = [
        Sample(at=NOW - timedelta(minutes=1), node="gpu-01", pci_bus_id="0000:1B:00.0", utilization_pct=11.0),
        Sample(at=NOW - timedelta(minutes=1), node="gpu-02", vendor="nvidia", index=0, utilization_pct=22.0),
    ]
    report = ingest.samples_ingest(samples=samples, source="t", now=NOW)
    assert report.used == 2
    assert five(d["gpu-01/1"], source="t").util_avg == 11.0
    assert five(d["gpu-02/0"], source="t").util_avg == 22.0


def test_the_same_scrape_twice_leaves_the_same_rows(ledger):
    at = NOW - timedelta(minutes=2)
    ingest.scrape_ingest(text=fixture_text("dcgm.prom"), at=at, now=NOW)
    before = list(DeviceRollup.objects.order_by("pk").values())
    report, _ = ingest.scrape_ingest(text=fixture_text("dcgm.prom"), at=at, now=NOW)
    after = list(DeviceRollup.objects.order_by("pk").values())
    for row in before + after:
        row.pop("updated_at")
    assert after == before
    assert report.used == 2 and report.rollups_written == 2  # a covering batch rewrites identical rows


def test_a_later_scrape_merges_and_a_repeated_older_one_is_skipped(ledger):
    device = ledger["devices"]["gpu-01/0"]

    def s(at, util):
        return Sample(at=at, device_id=device.pk, utilization_pct=util)

    ingest.samples_ingest(
        samples=[s(W0 + timedelta(seconds=10), 10.0), s(W0 + timedelta(seconds=20), 20.0)],
        source="t",
        now=NOW,
    )
    ingest.samples_ingest(samples=[s(W0 + timedelta(seconds=30), 60.0)], source="t", now=NOW)
    row = five(device, source="t")
    assert (row.sample_count, row.util_avg, row.util_max) == (3, 30.0, 60.0)
    # The middle sample again (inside the stored span): skipped, nothing double counted.
    report = ingest.samples_ingest(samples=[s(W0 + timedelta(seconds=20), 20.0)], source="t", now=NOW)
    assert report.skipped == {"already_ingested": 1} and report.used == 0
    row.refresh_from_db()
    assert (row.sample_count, row.util_avg) == (3, 30.0)
    # A re-query of the whole window replaces the row with exactly what it says.
    ingest.samples_ingest(
        samples=[s(W0 + timedelta(seconds=k * 10), 50.0) for k in range(1, 4)], source="t", now=NOW
    )
    row.refresh_from_db()
    assert (row.sample_count, row.util_avg) == (3, 50.0)


def test_counter_resets_count_from_zero_across_windows(ledger):
    device = ledger["devices"]["gpu-01/0"]
    values = [10, 15, 3, 5]  # 15 → 3 is a reset: +5, +3, +2
    samples = [
        Sample(at=W0 + timedelta(seconds=60 * k), device_id=device.pk, counters={"ecc_dbe": float(v)})
        for k, v in enumerate(values)
    ]
    report = ingest.samples_ingest(samples=samples, source="t", now=NOW)
    assert report.counter_resets == 1
    row = five(device, source="t")
    assert row.error_deltas == {"ecc_dbe": 10.0}
    assert row.counters_last == {"ecc_dbe": 5.0}
    # The next window continues from the stored baseline (5 → 9 = +4), in a separate ingest.
    ingest.samples_ingest(
        samples=[Sample(at=W0 + timedelta(minutes=6), device_id=device.pk, counters={"ecc_dbe": 9.0})],
        source="t",
        now=NOW,
    )
    assert five(device, source="t", window_start=W0 + timedelta(minutes=5)).error_deltas == {"ecc_dbe": 4.0}
    hourly = DeviceRollup.objects.get(device=device, resolution=3600, source="t")
    assert hourly.error_deltas == {"ecc_dbe": 14.0}
    # Uncorrectable errors rising is a fault: one critical event per window, not repeated on re-ingest.
    events = DeviceEvent.objects.filter(device=device, kind=DeviceEvent.Kind.HEALTH_CHANGED)
    assert events.count() == 2
    ingest.samples_ingest(samples=samples, source="t", now=NOW)
    assert events.count() == 2


def test_bad_samples_are_reported_by_reason_and_the_rest_is_used(ledger):
    device = ledger["devices"]["gpu-01/0"]
    samples = [
        Sample(at=NOW - timedelta(minutes=1), device_id=device.pk, utilization_pct=40.0),
        Sample(at=NOW - timedelta(minutes=1), device_id=device.pk, utilization_pct=41.0),  # same instant
        Sample(at=NOW + timedelta(hours=2), device_id=device.pk, utilization_pct=1.0),  # clock skew
        Sample(at=NOW - timedelta(days=60), device_id=device.pk, utilization_pct=1.0),  # past retention
        Sample(at=NOW - timedelta(minutes=1), uuid="GPU-not-in-ledger", utilization_pct=1.0),
        Sample(at=NOW - timedelta(minutes=1), device_id=999999, utilization_pct=1.0),
    ]
    report = ingest.samples_ingest(samples=samples, source="t", now=NOW)
    assert report.received == 6 and report.used == 1
    assert report.skipped == {
        "duplicate_sample": 1,
        "clock_skew_future": 1,
        "older_than_retention": 1,
        "device_not_in_ledger": 2,
    }
    assert "uuid=GPU-not-in-ledger" in report.as_dict()["examples"]["device_not_in_ledger"]
    assert five(device, source="t").util_avg == 40.0


def test_retired_cards_and_other_clusters_do_not_match(ledger, db):
    from apps.inventory.models import Cluster

    device = ledger["devices"]["gpu-01/1"]
    device.health = "retired"
    device.save()
    other = Cluster.objects.create(name="Other", slug="other")
    report, _ = ingest.scrape_ingest(text=fixture_text("dcgm.prom"), at=NOW, now=NOW, cluster=other)
    assert report.used == 0 and report.skipped["device_not_in_ledger"] == 2
    report, _ = ingest.scrape_ingest(
        text=fixture_text("dcgm.prom"), at=NOW, now=NOW, cluster=ledger["cluster"]
    )
    assert report.used == 1 and report.skipped["device_not_in_ledger"] == 1


def test_malformed_text_raises_and_writes_nothing(ledger):
    with pytest.raises(ParseFailed) as info:
        ingest.scrape_ingest(text='DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n', now=NOW)
    assert info.value.details == {"1": "expected ',' or '}' at column 30"} or "1" in info.value.details
    with pytest.raises(ParseFailed):
        ingest.scrape_ingest(text="   \n", now=NOW)
    assert not DeviceRollup.objects.exists()


def test_partly_malformed_text_reports_the_lines_and_uses_the_rest(ledger):
    text = fixture_text("hygon.prom") + "dcu_temp{device_id=broken} 1\n"
    report, _ = ingest.scrape_ingest(text=text, at=NOW, now=NOW)
    assert report.used == 1
    assert report.skipped["malformed_line"] == 1
    assert report.examples["malformed_line"][0].startswith(f"line {len(text.splitlines())}:")


def test_an_ingest_that_fails_half_way_writes_nothing(ledger):
    d = ledger["devices"]
    good = Sample(at=NOW - timedelta(minutes=1), device_id=d["gpu-01/0"].pk, utilization_pct=10.0)
    bad = Sample(
        at=NOW - timedelta(minutes=1), device_id=d["gpu-01/1"].pk, partition="x" * 80, utilization_pct=10.0
    )
    with pytest.raises(DataError):
        ingest.samples_ingest(samples=[good, bad], source="t", now=NOW)
    assert not DeviceRollup.objects.exists()


def test_dry_run_writes_nothing_and_bad_arguments_are_rejected(ledger):
    report, conv = ingest.scrape_ingest(text=fixture_text("dcgm.prom"), at=NOW, now=NOW, dry_run=True)
    assert report.dry_run and report.used == 2 and report.rollups_written == 2
    assert not DeviceRollup.objects.exists()
    with pytest.raises(ValidationFailed):
        ingest.samples_ingest(samples=[], source="t", quality="guess")
    with pytest.raises(ValidationFailed):
        ingest.samples_ingest(samples=[], source="")


def test_synthetic_samples_are_marked_estimated(ledger):
    device = ledger["devices"]["gpu-01/0"]
    ingest.samples_ingest(
        samples=[Sample(at=NOW - timedelta(minutes=1), device_id=device.pk, utilization_pct=33.0)],
        source="simulated:tele",
        quality=Quality.ESTIMATED,
        scrape_interval_s=10,
        now=NOW,
    )
    row = five(device)
    assert (row.quality, row.scrape_interval_s, row.source) == ("estimated", 10, "simulated:tele")
    assert DeviceRollup.objects.get(device=device, resolution=3600).quality == "estimated"


def test_health_events_for_xid_unhealthy_and_temperature(ledger, settings):
    settings.SUANCHI = {**settings.SUANCHI, "TELEMETRY_TEMP_LIMIT_C": 60.0}
    text = fixture_text("dcgm.prom").replace(
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaaaaaa-0000-0000-0000-000000000000",pci_bus_id="00000000:1A:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-01",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="vision",pod="suanchi-12-a0-x7k2p"} 0',
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaaaaaa-0000-0000-0000-000000000000",pci_bus_id="00000000:1A:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-01",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",namespace="vision",pod="suanchi-12-a0-x7k2p"} 79',
    )
    report, _ = ingest.scrape_ingest(text=text, at=NOW, now=NOW)
    device = ledger["devices"]["gpu-01/0"]
    messages = sorted(
        DeviceEvent.objects.filter(device=device, kind=DeviceEvent.Kind.HEALTH_CHANGED).values_list(
            "severity", "message"
        )
    )
    assert len(messages) == 2 and report.events_raised == 2
    assert messages[0][0] == "critical" and "XID 79" in messages[0][1]
    # A critical event on one card cordons that card (apps.scheduling.faults: proportion).
    device.refresh_from_db()
    assert device.cordoned and "XID 79" in device.cordon_reason
    assert messages[1][0] == "warning" and "60 °C" in messages[1][1]
    assert five(device).health == {"xid": [79], "temp_over": 60.0}
    # Same window again: no new event.
    ingest.scrape_ingest(text=text, at=NOW + timedelta(seconds=10), now=NOW + timedelta(seconds=10))
    assert DeviceEvent.objects.filter(device=device, kind=DeviceEvent.Kind.HEALTH_CHANGED).count() == 2
    unhealthy = 'npu_chip_info_health_status{id="0",vdie_id="5A3C2F10-0000-0000-0000-000000000001"} 0\n'
    ingest.scrape_ingest(text=unhealthy, at=NOW, now=NOW)
    event = DeviceEvent.objects.get(
        device=ledger["devices"]["npu-01/0"], kind=DeviceEvent.Kind.HEALTH_CHANGED
    )
    assert event.severity == "critical" and "unhealthy" in event.message


def test_retention_purge_drops_old_rows(ledger, settings):
    device = ledger["devices"]["gpu-01/0"]
    old = NOW - timedelta(days=10)
    ingest.samples_ingest(
        samples=[Sample(at=old, device_id=device.pk, utilization_pct=5.0)], source="t", now=NOW
    )
    assert DeviceRollup.objects.count() == 2
    settings.SUANCHI = {**settings.SUANCHI, "TELEMETRY_ROLLUP_RETENTION_DAYS": 7}
    result = rollups.rollups_purge(now=NOW)
    assert result["five_minute"] == 1 and result["hourly"] == 0
    assert list(DeviceRollup.objects.values_list("resolution", flat=True)) == [3600]
