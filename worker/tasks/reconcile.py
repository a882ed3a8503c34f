"""Reconcile tasks: move jobs through their states from what the clusters report.

Beat runs ``reconcile_task`` every period; it sends one ``reconcile_cluster_task`` per cluster with
something to reconcile, so a cluster whose API server hangs holds up its own task only (each
Kubernetes call is bounded by the client timeout, the pass by ``RECONCILE_DEADLINE_S``), never the
other clusters' passes. A cluster whose last pass failed is not sent again before its backoff ran out
(``apps.clusters.health``); two passes over one cluster never overlap (a per-cluster lock).
"""

from celery import shared_task

from apps.core import task_names
from apps.scheduling.reconcile import reconcile_cluster_run, reconcile_due_clusters
from apps.telemetry.plugin_readback import plugin_readback
from worker import time_limits

# The beat period of "reconcile" (worker/celery.py): a cluster's message not started within one
# period is dropped, the next period sends a fresh one (no backlog replays after an outage).
RECONCILE_PERIOD_S = 10.0


@shared_task(name=task_names.RECONCILE, **time_limits.SHORT, ignore_result=True)
def reconcile_task() -> dict:
    """Send this period's reconcile of every due cluster, one task each."""
    due, waiting = reconcile_due_clusters()
    for cluster_id in due:
        reconcile_cluster_task.apply_async(args=[cluster_id], expires=RECONCILE_PERIOD_S)
    return {"sent": due, "backing_off": waiting}


@shared_task(name=task_names.RECONCILE_CLUSTER, **time_limits.MEDIUM, acks_late=True, ignore_result=True)
def reconcile_cluster_task(cluster_id: int) -> dict:
    """One cluster: list our objects, update job states, retry or fail (skipped when the cluster is
    gone, backing off, or already being reconciled). Idempotent: every state change is conditional.
    The pods each pass lists go to telemetry's read-back of the chips device plugins gave them."""
    return reconcile_cluster_run(cluster_id=cluster_id, actor="reconciler", readback=plugin_readback)
