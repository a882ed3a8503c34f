from celery import shared_task

from apps.telemetry import services
from apps.telemetry.simulated import simulated_telemetry_emit


@shared_task(name="worker.tasks.telemetry.telemetry_ingest_task", acks_late=True)
def telemetry_ingest_task() -> dict:
    """Ingest the latest windows of every enabled metric source (none configured → nothing to do).

    Idempotent: a re-read window replaces its rollups, so a redelivered task changes nothing.
    """
    result = services.sources_ingest(actor="worker")
    result["simulated"] = simulated_telemetry_emit()  # simulated clusters emit their own
    result["purged"] = services.rollups_purge()
    return result


@shared_task(name="worker.tasks.telemetry.backfill_task", acks_late=True, ignore_result=True)
def backfill_task(run_id: int) -> None:
    """Run one queued metric backfill (a redelivered message finds it no longer queued)."""
    services.backfill_run(run_id=run_id, actor="worker")
