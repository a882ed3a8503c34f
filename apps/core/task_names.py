"""The name of every Celery task of the project: one constant each, used by everything that names one.

Apps sit below ``worker/`` and never import it, so they send tasks by name
(``apps.core.tasks.enqueue_on_commit(task_names.PUSH_STREAM, stream)``). A name written twice as a
string drifts: a renamed task silently drops every message still sent under the old name. Here each
name is written once; the task itself (``@shared_task(name=task_names.X)`` in ``worker/tasks/``),
every sender and the beat schedule (``worker/celery.py``) use the constant, and
``tests/core/test_task_names.py`` checks that every constant is a task registered in the Celery app
and every registered project task has a constant.
"""

from __future__ import annotations

# billing (queue "billing")
METERING = "worker.tasks.billing.metering_task"
MONTH_CLOSE = "worker.tasks.billing.month_close_task"
# clusters (queue "ingest")
CLUSTER_SYNC = "worker.tasks.clusters.cluster_sync_task"
# inventory (queue "ingest")
NODE_STALENESS_CHECK = "worker.tasks.inventory.node_staleness_check_task"
LEDGER_IMPORT = "worker.tasks.inventory.ledger_import_task"
# migration cockpit (queue "default")
GATES_EVALUATE = "worker.tasks.migration.gates_evaluate_task"
# notify (queue "default")
DELIVERIES_SEND = "worker.tasks.notify.deliveries_send_task"
QUOTA_CHECK = "worker.tasks.notify.quota_check_task"
ALERTS_EVALUATE = "worker.tasks.notify.alerts_evaluate_task"
# push (queue "push")
PUSH_STREAM = "worker.tasks.push.push_stream_task"
PUSH_STREAMS = "worker.tasks.push.push_streams_task"
PUSH_PENDING = "worker.tasks.push.push_pending_task"
PUSH_CLUSTERS = "worker.tasks.push.push_clusters_task"
PUSH_CLUSTER = "worker.tasks.push.push_cluster_task"
# reconcile (queue "push")
RECONCILE = "worker.tasks.reconcile.reconcile_task"
RECONCILE_CLUSTER = "worker.tasks.reconcile.reconcile_cluster_task"
# rollout (queue "default")
ROLLOUT_EVALUATE = "worker.tasks.rollout.rollout_evaluate_task"
AUTOSCALE = "worker.tasks.rollout.autoscale_task"
# scheduling (queue "scheduler")
SCHEDULING_CYCLE = "worker.tasks.scheduling.scheduling_cycle_task"
# telemetry (queue "ingest")
TELEMETRY_INGEST = "worker.tasks.telemetry.telemetry_ingest_task"
BACKFILL = "worker.tasks.telemetry.backfill_task"


def all_task_names() -> dict[str, str]:
    """``{constant: task name}`` of every constant above."""
    return {key: value for key, value in globals().items() if key.isupper() and isinstance(value, str)}
