"""Celery tasks: thin wrappers that look rows up again and call one service."""

from worker.tasks.billing import metering_task, month_close_task
from worker.tasks.clusters import cluster_sync_task
from worker.tasks.inventory import ledger_import_task, node_staleness_check_task
from worker.tasks.migration import gates_evaluate_task
from worker.tasks.notify import deliveries_send_task, quota_check_task
from worker.tasks.push import (
    push_cluster_task,
    push_clusters_task,
    push_pending_task,
    push_stream_task,
    push_streams_task,
)
from worker.tasks.reconcile import reconcile_cluster_task, reconcile_task
from worker.tasks.rollout import autoscale_task, rollout_evaluate_task
from worker.tasks.scheduling import scheduling_cycle_task
from worker.tasks.telemetry import backfill_task, telemetry_ingest_task

__all__ = [
    "autoscale_task",
    "backfill_task",
    "cluster_sync_task",
    "deliveries_send_task",
    "gates_evaluate_task",
    "ledger_import_task",
    "metering_task",
    "month_close_task",
    "node_staleness_check_task",
    "push_cluster_task",
    "push_clusters_task",
    "push_pending_task",
    "push_stream_task",
    "push_streams_task",
    "quota_check_task",
    "reconcile_cluster_task",
    "reconcile_task",
    "rollout_evaluate_task",
    "scheduling_cycle_task",
    "telemetry_ingest_task",
]
