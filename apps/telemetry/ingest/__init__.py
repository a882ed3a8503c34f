"""Telemetry writes: samples → 5-minute and hourly rollups, job attribution, health events.

``samples_ingest`` (``write.py``) is the one write path. Whatever the origin (an exporter scrape, a
Prometheus range query, the simulated cluster backend — ``front_doors.py``), samples are aggregated in
memory per (device, partition, 5-minute window) and written with one bulk upsert inside one
transaction, so a failed ingest writes nothing. Re-ingesting samples already in a window changes
nothing: a batch that covers a stored window's first and last sample replaces it (a re-queried window);
samples inside a stored window's time span are skipped as ``already_ingested``; later samples are
merged into it. Counter increases follow Prometheus' ``increase()`` (``apps.telemetry.rollups``).
"""

from apps.telemetry.ingest.devices import DeviceResolver
from apps.telemetry.ingest.front_doors import (
    prometheus_ingest,
    prometheus_query,
    scrape_convert,
    scrape_ingest,
    source_ingest,
    sources_ingest,
)
from apps.telemetry.ingest.report import MAX_REJECTED_LINES, IngestReport
from apps.telemetry.ingest.write import samples_ingest

__all__ = [
    "MAX_REJECTED_LINES",
    "DeviceResolver",
    "IngestReport",
    "prometheus_ingest",
    "prometheus_query",
    "samples_ingest",
    "scrape_convert",
    "scrape_ingest",
    "source_ingest",
    "sources_ingest",
]
