"""The counter baseline of an ingest: the latest stored window before the batch, per card and partition.

It was read with ``DISTINCT ON`` (PostgreSQL only), so counter ingestion failed on the SQLite demo; it is
a window function now (``ROW_NUMBER() OVER (PARTITION BY …)``), which both databases run, with the same
rows. The second test runs the demo's way: SQLite under a temporary ``var/``, in a process of its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.telemetry import ingest
from apps.telemetry.models import DeviceRollup
from apps.telemetry.samples import Sample
from tests.fixtures.sqlite_demo import run_on_sqlite_demo

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
W0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)


def _sample(device, minutes: float, value: float, partition: str = "") -> Sample:
    return Sample(
        at=W0 + timedelta(minutes=minutes),
        device_id=device.pk,
        partition=partition,
        counters={"ecc_dbe": value},
    )


@pytest.mark.django_db
def test_each_card_and_partition_continues_from_its_own_latest_earlier_window(ledger):
    a, b = ledger["devices"]["gpu-01/0"], ledger["devices"]["gpu-01/1"]
    # Earlier windows, ingested one by one: a's whole card 1 → 4 → 6, a's instance 10 → 20, b 100.
    for minutes, value, device, partition in (
        (1, 1.0, a, ""),
        (6, 4.0, a, ""),
        (11, 6.0, a, ""),
        (1, 10.0, a, "1g.10gb/1"),
        (6, 20.0, a, "1g.10gb/1"),
        (6, 100.0, b, ""),
    ):
        ingest.samples_ingest(samples=[_sample(device, minutes, value, partition)], source="t", now=NOW)
    # One later batch for all three: each counts from its own latest stored value.
    later = [_sample(a, 21, 9.0), _sample(a, 21, 25.0, "1g.10gb/1"), _sample(b, 21, 101.0)]
    ingest.samples_ingest(samples=later, source="t", now=NOW)
    window = W0 + timedelta(minutes=20)
    deltas = {
        (r.device_id, r.partition): r.error_deltas
        for r in DeviceRollup.objects.filter(resolution=300, source="t", window_start=window)
    }
    assert deltas == {
        (a.pk, ""): {"ecc_dbe": 3.0},
        (a.pk, "1g.10gb/1"): {"ecc_dbe": 5.0},
        (b.pk, ""): {"ecc_dbe": 1.0},
    }


DEMO_SCRIPT = """
    from datetime import UTC, datetime, timedelta
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.telemetry.ingest import samples_ingest
    from apps.telemetry.models import DeviceRollup
    from apps.telemetry.samples import Sample

    cluster = Cluster.objects.create(name="Demo", slug="demo-sqlite")
    pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
    node = Node.objects.create(cluster=cluster, pool=pool, name="gpu-01")
    card = Device.objects.create(node=node, vendor="nvidia", index=0, memory_mib=81920)
    now = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    w0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
    def at(minutes, value):
        return Sample(at=w0 + timedelta(minutes=minutes), device_id=card.pk, counters={"ecc_dbe": value})
    samples_ingest(samples=[at(1, 5.0)], source="t", now=now)
    samples_ingest(samples=[at(6, 9.0)], source="t", now=now)  # reads the baseline: 5 → 9
    row = DeviceRollup.objects.get(resolution=300, window_start=w0 + timedelta(minutes=5))
    print("deltas", row.error_deltas, flush=True)
"""


def test_counter_ingestion_runs_on_the_sqlite_demo(tmp_path):
    stdout = run_on_sqlite_demo(DEMO_SCRIPT, tmp_path)
    assert "deltas {'ecc_dbe': 4.0}" in stdout, stdout[-2000:]
