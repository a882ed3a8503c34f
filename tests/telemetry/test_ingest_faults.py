"""Metrics ingested twice or out of order: the rollups are those of one in-order ingestion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.telemetry import ingest
from apps.telemetry.models import DeviceRollup
from apps.telemetry.samples import Sample

pytestmark = pytest.mark.django_db

W0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
FIELDS = (
    "device_id",
    "resolution",
    "window_start",
    "partition",
    "util_avg",
    "util_max",
    "mem_used_avg_mib",
    "mem_used_max_mib",
    "temp_max_c",
    "power_avg_w",
    "sample_count",
)


def window(devices, k: int) -> list[Sample]:
    """Four 15-second samples per card in 5-minute window ``k`` (values differ per window and card)."""
    start = W0 + timedelta(minutes=5 * k)
    return [
        Sample(
            at=start + timedelta(seconds=15 * i + 5),
            device_id=device.pk,
            utilization_pct=float((7 * k + 3 * i + 11 * n) % 100),
            memory_used_mib=1024.0 * (k + i + 1),
            temperature_c=40.0 + k + i,
            power_w=100.0 + 10 * k + i,
        )
        for n, device in enumerate(devices)
        for i in range(4)
    ]


def rollups(source: str) -> list[tuple]:
    return list(
        DeviceRollup.objects.filter(source=source)
        .order_by("device_id", "resolution", "window_start", "partition")
        .values_list(*FIELDS)
    )


def test_metrics_twice_and_out_of_order_leave_the_in_order_rollups(ledger):
    devices = [ledger["devices"]["gpu-01/0"], ledger["devices"]["gpu-01/1"], ledger["devices"]["npu-01/0"]]
    for k in range(6):
        ingest.samples_ingest(samples=window(devices, k), source="in-order", now=NOW)
    expected = rollups("in-order")
    assert len(expected) == 3 * 6 + 3  # six 5-minute rows and one hourly row per card

    for k in (3, 0, 5, 1, 4, 2):  # out of order
        ingest.samples_ingest(samples=window(devices, k), source="shuffled", now=NOW)
    for k in (5, 4, 3, 2, 1, 0):  # every window again, newest first
        ingest.samples_ingest(samples=window(devices, k), source="shuffled", now=NOW)
    # A whole batch of every window at once, twice.
    everything = [s for k in range(6) for s in window(devices, k)]
    ingest.samples_ingest(samples=everything, source="shuffled", now=NOW)
    ingest.samples_ingest(samples=everything, source="shuffled", now=NOW)

    assert rollups("shuffled") == expected
    hourly = DeviceRollup.objects.get(source="shuffled", device=devices[0], resolution=3600)
    assert hourly.sample_count == 24


def test_a_late_sample_inside_an_ingested_window_is_not_double_counted(ledger):
    device = ledger["devices"]["gpu-01/0"]
    samples = window([device], 0)
    ingest.samples_ingest(samples=samples, source="t", now=NOW)
    before = rollups("t")
    # The same readings again, one by one and in reverse: nothing changes.
    for sample in reversed(samples):
        ingest.samples_ingest(samples=[sample], source="t", now=NOW)
    assert rollups("t") == before
