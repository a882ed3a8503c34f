"""The old import path of telemetry's writes, kept for other apps, tests and benchmarks that import it.

The code lives by topic: ``apps.telemetry.ingest`` (samples → rollups, the front doors),
``apps.telemetry.rollups``, ``apps.telemetry.attribution``, ``apps.telemetry.health_events``,
``apps.telemetry.metric_sources`` and ``apps.telemetry.windows``. New code imports from there.
"""

from apps.telemetry.attribution import job_summaries_rebuild
from apps.telemetry.health_events import _health_events
from apps.telemetry.ingest import (
    DeviceResolver,
    IngestReport,
    prometheus_ingest,
    prometheus_query,
    samples_ingest,
    scrape_convert,
    scrape_ingest,
    source_ingest,
    sources_ingest,
)
from apps.telemetry.metric_sources import (
    BACKFILL_RUN_KIND,
    BACKFILL_TASK,
    backfill_request,
    backfill_run,
    metric_source_create,
    metric_source_delete,
    metric_source_update,
)
from apps.telemetry.rollups import FAULT_COUNTERS, fleet_rollups_rebuild, rollups_purge
from apps.telemetry.windows import HOUR_S, WINDOW_S, setting

__all__ = [
    "BACKFILL_RUN_KIND",
    "BACKFILL_TASK",
    "FAULT_COUNTERS",
    "HOUR_S",
    "WINDOW_S",
    "DeviceResolver",
    "IngestReport",
    "_health_events",
    "backfill_request",
    "backfill_run",
    "fleet_rollups_rebuild",
    "job_summaries_rebuild",
    "metric_source_create",
    "metric_source_delete",
    "metric_source_update",
    "prometheus_ingest",
    "prometheus_query",
    "rollups_purge",
    "samples_ingest",
    "scrape_convert",
    "scrape_ingest",
    "setting",
    "source_ingest",
    "sources_ingest",
]
