from celery import shared_task

from apps.core import task_names
from apps.inventory.services import health
from worker import time_limits


@shared_task(name=task_names.NODE_STALENESS_CHECK, **time_limits.SHORT, acks_late=True)
def node_staleness_check_task() -> dict:
    """Flag nodes whose agent stopped reporting (idempotent: a flagged node is not flagged twice)."""
    return health.node_staleness_check(actor="worker")


@shared_task(name=task_names.LEDGER_IMPORT, **time_limits.LONG, acks_late=True, ignore_result=True)
def ledger_import_task(run_id: int) -> None:
    """Run one queued ledger import (a redelivered message finds it no longer queued)."""
    from apps.inventory.services.ledger import ledger_import_run
    from apps.scheduling.faults import node_moved

    ledger_import_run(run_id=run_id, on_node_moved=node_moved)
