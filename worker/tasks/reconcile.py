"""Reconcile task: move jobs through their states from what the clusters report."""

from celery import shared_task

from apps.scheduling.reconcile import reconcile_all


@shared_task(name="worker.tasks.reconcile.reconcile_task", acks_late=True, ignore_result=True)
def reconcile_task() -> list[dict]:
    """Every cluster with active jobs: list our objects, update job states, retry or fail."""
    return reconcile_all(actor="reconciler")
