from celery import shared_task

from apps.core import task_names
from apps.telemetry import ingest, metric_sources, rollups
from apps.telemetry.synthetic_samples import simulated_telemetry_emit
from worker import time_limits


@shared_task(name=task_names.TELEMETRY_INGEST, **time_limits.MEDIUM, acks_late=True)
def telemetry_ingest_task() -> dict:
    """Ingest the latest windows of every enabled metric source (none configured → nothing to do).

    Idempotent: a re-read window replaces its rollups, so a redelivered task changes nothing.
    """
    result = ingest.sources_ingest(actor="worker")
    result["simulated"] = simulated_telemetry_emit()  # simulated clusters emit their own
    result["purged"] = rollups.rollups_purge()
    return result


@shared_task(name=task_names.BACKFILL, **time_limits.LONG, acks_late=True, ignore_result=True)
def backfill_task(run_id: int) -> None:
    """Run one queued metric backfill (a redelivered message finds it no longer queued)."""
    metric_sources.backfill_run(run_id=run_id, actor="worker")
