from celery import shared_task

from apps.inventory.services import health


@shared_task(name="worker.tasks.inventory.node_staleness_check_task", acks_late=True)
def node_staleness_check_task() -> dict:
    """Flag nodes whose agent stopped reporting (idempotent: a flagged node is not flagged twice)."""
    return health.node_staleness_check(actor="worker")
