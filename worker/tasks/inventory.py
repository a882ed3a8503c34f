from celery import shared_task

from apps.inventory.services import health


@shared_task(name="worker.tasks.inventory.node_staleness_check_task", acks_late=True)
def node_staleness_check_task() -> dict:
    """Flag nodes whose agent stopped reporting (idempotent: a flagged node is not flagged twice)."""
    return health.node_staleness_check(actor="worker")


@shared_task(name="worker.tasks.inventory.ledger_import_task", acks_late=True, ignore_result=True)
def ledger_import_task(run_id: int) -> None:
    """Run one queued ledger import (a redelivered message finds it no longer queued)."""
    from apps.inventory.services.ledger import ledger_import_run

    ledger_import_run(run_id=run_id)
