"""Migration cockpit task: keep every service's gate status current from the measured data."""

from celery import shared_task

from apps.core import task_names
from apps.migration.models import MigratedService, Phase
from apps.migration.services import service_gates_evaluate
from worker import time_limits


@shared_task(name=task_names.GATES_EVALUATE, **time_limits.MEDIUM, acks_late=True, ignore_result=True)
def gates_evaluate_task() -> dict:
    """Evaluate the gates of each service not yet in the last phase (idempotent: it only records the
    current verdict)."""
    checked = {"passed": 0, "failed": 0}
    for service in MigratedService.objects.exclude(phase=Phase.REDUCE).order_by("pk"):
        results = service_gates_evaluate(service=service, actor="worker")
        checked["passed" if all(r["status"] == "pass" for r in results) else "failed"] += 1
    return checked
