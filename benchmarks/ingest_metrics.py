"""Telemetry ingest: samples per second into 5-minute + hourly rollups (PostgreSQL).

One hour of 10-second samples for 2,000 devices = 720,000 samples (utilization, memory, temperature,
power and one error counter each), ingested twice from scratch:

- baseline: a naive per-row path — for every sample, read its 5-minute rollup row, update it in
  Python and save it (get_or_create + save), as a straightforward ORM service would;
- ORM write path: ``samples_ingest`` with the rollups written the way it did before issue 20 —
  model instances through ``bulk_create(update_conflicts=True)`` and the 5-minute rows read back from
  the database for the hourly rebuild (the same aggregation otherwise);
- suanchi: ``apps.telemetry.ingest.samples_ingest`` (in-memory aggregation, ``COPY`` into a
  staging table + one ``INSERT … ON CONFLICT`` upsert, hourly rows from the rows just written).

The baseline is measured on a slice (BENCH_BASELINE_SAMPLES, default 3,000 samples) and reported
per second; the other paths ingest all samples (the ORM path under a source of its own), then
suanchi ingests the same hour again to show that the second pass changes nothing (same rows, same
values). Rates are given on the wall clock and on this process's CPU time (the database server is
another process). Figures only; nothing is asserted on time. Goal (issue 20): ≥ 100,000 samples/s on
one core — 80,000 cards at a 10 s scrape are 8,000 samples/s.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_telemetry python benchmarks/ingest_metrics.py
"""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime, timedelta

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_telemetry")

import django  # noqa: E402

DEVICES = int(os.environ.get("BENCH_DEVICES", 2000))
STEP_S = 10
HOUR_SAMPLES = 3600 // STEP_S
BASELINE_SAMPLES = int(os.environ.get("BENCH_BASELINE_SAMPLES", 3000))


def build_ledger() -> list[int]:
    from apps.inventory.models import Cluster, Device, Node

    cluster = Cluster.objects.create(name="Bench", slug="bench")
    nodes = Node.objects.bulk_create(
        [Node(cluster=cluster, name=f"node-{i:04d}") for i in range(DEVICES // 8)]
    )
    devices = Device.objects.bulk_create(
        [
            Device(node=node, vendor="nvidia", index=i, uuid=f"GPU-{node.pk:06d}-{i}")
            for node in nodes
            for i in range(8)
        ]
    )
    return [d.pk for d in devices]


def make_samples(device_ids: list[int], start: datetime):
    from apps.telemetry.samples import Sample

    rng = random.Random(7)
    t0 = start.timestamp()
    samples = []
    for k in range(HOUR_SAMPLES):
        at = t0 + k * STEP_S
        for n, pk in enumerate(device_ids):
            samples.append(
                Sample(
                    at=at,
                    device_id=pk,
                    utilization_pct=float(rng.randrange(0, 101)),
                    memory_used_mib=float(rng.randrange(0, 81920)),
                    memory_total_mib=81920.0,
                    temperature_c=40.0 + (n % 30),
                    power_w=100.0 + (k % 300),
                    counters={"pcie_replay": float(k // 60)},
                )
            )
    return samples


def naive_ingest(samples, source: str) -> None:
    """One read-modify-write per sample (what a per-row ORM service does)."""
    from django.db import transaction

    from apps.telemetry.models import DeviceRollup

    with transaction.atomic():
        for s in samples:
            window = datetime.fromtimestamp(s.at - s.at % 300, tz=UTC)
            at = datetime.fromtimestamp(s.at, tz=UTC)
            row, created = DeviceRollup.objects.get_or_create(
                device_id=s.device_id,
                partition="",
                resolution=300,
                window_start=window,
                source=source,
                defaults={"first_sample_at": at, "last_sample_at": at},
            )
            row.sample_count += 1
            row.util_sum += s.utilization_pct
            row.util_n += 1
            row.util_avg = row.util_sum / row.util_n
            row.util_max = max(row.util_max or 0, s.utilization_pct)
            row.mem_used_sum += s.memory_used_mib
            row.mem_used_n += 1
            row.temp_max_c = max(row.temp_max_c or 0, s.temperature_c)
            row.power_sum += s.power_w
            row.power_n += 1
            row.last_sample_at = at
            row.save()


def orm_write_path():
    """Patch the write path to write rollups the pre-issue-20 way (see the module docstring); returns
    the undo function. The upsert is looked up in ``ingest.write`` and ``rollups``, the hourly rebuild
    in ``ingest.write``."""
    from apps.telemetry import rollups
    from apps.telemetry.ingest import write
    from apps.telemetry.models import DeviceRollup

    saved = write._rollups_upsert, write._rebuild_hours

    def orm_upsert(rows) -> None:
        instances = [DeviceRollup(**{name: getattr(r, name) for name in rollups._ROW_COLUMNS}) for r in rows]
        DeviceRollup.objects.bulk_create(
            instances,
            batch_size=2000,
            update_conflicts=True,
            unique_fields=rollups._UNIQUE,
            update_fields=rollups._ROLLUP_UPDATE_FIELDS,
        )

    def rebuild_from_database(*args, written=None, **kwargs):
        return saved[1](*args, **kwargs)  # nothing handed over: every 5-minute row is read back

    write._rollups_upsert, write._rebuild_hours = orm_upsert, rebuild_from_database
    rollups._rollups_upsert = orm_upsert

    def undo() -> None:
        write._rollups_upsert, write._rebuild_hours = saved
        rollups._rollups_upsert = saved[0]

    return undo


def fleet_values(source: str) -> list[tuple]:
    """The fleet rollups ingest writes beside the card rollups (one row per node, model and window)."""
    from apps.telemetry.models import FleetRollup

    return list(
        FleetRollup.objects.filter(source=source)
        .order_by("resolution", "window_start", "node_id", "vendor", "model_label")
        .values_list(
            "resolution", "window_start", "node_id", "cards", "estimated", "util_sum", "util_n", "util_max"
        )
    )


def rollup_values(source: str) -> list[tuple]:
    from apps.telemetry.models import DeviceRollup

    return list(
        DeviceRollup.objects.filter(source=source)
        .order_by("device_id", "partition", "resolution", "window_start")
        .values_list(
            "device_id",
            "partition",
            "resolution",
            "window_start",
            "sample_count",
            "first_sample_at",
            "last_sample_at",
            "util_sum",
            "util_max",
            "mem_used_sum",
            "mem_used_max_mib",
            "temp_max_c",
            "power_sum",
            "error_deltas",
            "counters_last",
            "health",
            "pods",
        )
    )


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ensure_database()
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from apps.telemetry.ingest import samples_ingest
    from apps.telemetry.models import DeviceRollup

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE telemetry_jobutilization, telemetry_devicerollup, inventory_deviceevent, inventory_device, "
            "inventory_node, inventory_cluster CASCADE"
        )
    device_ids = build_ledger()
    start = (datetime.now(tz=UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    samples = make_samples(device_ids, start)
    print(f"ledger: {len(device_ids)} devices; samples: {len(samples)} (1 h at {STEP_S} s) (PostgreSQL)")

    slice_ = samples[:BASELINE_SAMPLES]
    t = time.perf_counter()
    naive_ingest(slice_, source="bench-naive")
    base_s = time.perf_counter() - t
    base_rate = len(slice_) / base_s

    undo = orm_write_path()
    try:
        orm, orm_s, orm_cpu = timed(
            lambda: samples_ingest(samples=samples, source="bench-orm", scrape_interval_s=STEP_S)
        )
    finally:
        undo()

    report, ours_s, ours_cpu = timed(
        lambda: samples_ingest(samples=samples, source="bench", scrape_interval_s=STEP_S)
    )
    ours_rate = report.used / ours_s
    rows_after_first = DeviceRollup.objects.filter(source="bench").count()
    values_after_first = rollup_values("bench")
    fleet_after_first = fleet_values("bench")
    same_as_orm = [v[1:] for v in values_after_first] == [v[1:] for v in rollup_values("bench-orm")]

    again, again_s, again_cpu = timed(
        lambda: samples_ingest(samples=samples, source="bench", scrape_interval_s=STEP_S)
    )
    rows_after_second = DeviceRollup.objects.filter(source="bench").count()
    unchanged = rows_after_first == rows_after_second and rollup_values("bench") == values_after_first
    fleet_unchanged = bool(fleet_after_first) and fleet_values("bench") == fleet_after_first

    print(
        f"{'baseline (read-modify-write per sample)':44s} {base_rate:10.0f} samples/s  "
        f"({len(slice_)} samples in {base_s:6.2f} s)"
    )
    print(
        f"{'ORM write path (bulk_create, read-back)':44s} {orm.used / orm_s:10.0f} samples/s  "
        f"({orm.used} samples in {orm_s:6.2f} s; CPU {orm_cpu:6.2f} s = {orm.used / orm_cpu:.0f} samples/s)"
    )
    print(
        f"{'suanchi samples_ingest (COPY + upsert)':44s} {ours_rate:10.0f} samples/s  "
        f"({report.used} samples in {ours_s:6.2f} s; CPU {ours_cpu:6.2f} s = {report.used / ours_cpu:.0f} "
        f"samples/s; {report.rollups_written} 5-min rows, {report.hourly_written} hourly rows)"
    )
    print(
        f"speed-up: {ours_rate / base_rate:6.1f}x the per-sample baseline, {orm_s / ours_s:4.2f}x the ORM write "
        f"path (wall), {orm_cpu / ours_cpu:4.2f}x (CPU); same rollups as the ORM path: {same_as_orm}"
    )
    print(
        f"goal: >= 100000 samples/s on one core; at this rate one core keeps up with "
        f"{ours_rate * STEP_S:,.0f} cards at a {STEP_S} s scrape (80,000 needed)"
    )
    print(
        f"same hour again: {again_s:6.2f} s (CPU {again_cpu:6.2f} s), used {again.used}, skipped "
        f"{dict(again.skipped)}; rollup rows {rows_after_first} -> {rows_after_second}, "
        f"values unchanged: {unchanged}; fleet rollups ({len(fleet_after_first)} rows) unchanged: {fleet_unchanged}"
    )


if __name__ == "__main__":
    main()
