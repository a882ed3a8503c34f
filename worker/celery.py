"""The Celery application: queues per concern, one beat schedule in code."""

import os

from celery import Celery
from kombu import Exchange, Queue

from worker import broker

# filesystem:// (the demo's embedded broker) is the atomic variant in worker/broker.py, in the web
# process, the worker and beat alike (each imports this module).
broker.register()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("suanchi")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = [
    Queue(name, Exchange(name, type="direct"), routing_key=name)
    for name in ("default", "scheduler", "push", "ingest", "billing")
]
app.conf.task_default_exchange = "default"
app.conf.task_default_routing_key = "default"
app.conf.task_default_queue = "default"
app.conf.task_routes = {
    "worker.tasks.inventory.*": {"queue": "ingest"},
    "worker.tasks.scheduling.*": {"queue": "scheduler"},
    "worker.tasks.push.*": {"queue": "push"},
    "worker.tasks.reconcile.*": {"queue": "push"},
    "worker.tasks.clusters.*": {"queue": "ingest"},
    "worker.tasks.telemetry.*": {"queue": "ingest"},
    "worker.tasks.billing.*": {"queue": "billing"},
    "worker.tasks.rollout.*": {"queue": "default"},
    "worker.tasks.migration.*": {"queue": "default"},
    "worker.tasks.notify.*": {"queue": "default"},
}
# (entry, task, every N seconds). A run not started within two periods is dropped (``expires``):
# the next one does the same work, so a backlog after an outage never replays.
BEAT = [
    ("scheduling-cycle", "worker.tasks.scheduling.scheduling_cycle_task", 5.0),
    # push and reconcile fan out: one task per cluster, so a cluster that hangs delays only itself
    ("push-pending", "worker.tasks.push.push_clusters_task", 10.0),
    ("reconcile", "worker.tasks.reconcile.reconcile_task", 10.0),
    ("cluster-sync", "worker.tasks.clusters.cluster_sync_task", 300.0),
    ("telemetry-ingest", "worker.tasks.telemetry.telemetry_ingest_task", 60.0),
    ("autoscale", "worker.tasks.rollout.autoscale_task", 60.0),
    ("rollout-evaluate", "worker.tasks.rollout.rollout_evaluate_task", 300.0),
    ("inventory-mark-stale-nodes", "worker.tasks.inventory.node_staleness_check_task", 300.0),
    ("billing-meter", "worker.tasks.billing.metering_task", 900.0),
    ("migration-gates", "worker.tasks.migration.gates_evaluate_task", 900.0),
    # the outbox's safety net: deliveries whose after-commit task was lost, and retries that are due
    ("notify-send", "worker.tasks.notify.deliveries_send_task", 30.0),
    ("notify-quota-check", "worker.tasks.notify.quota_check_task", 600.0),
    # alert rules on measurements (hysteresis in apps/notify/alerts.py): one evaluation a minute
    ("notify-alerts", "worker.tasks.notify.alerts_evaluate_task", 60.0),
]
app.conf.beat_schedule = {
    name: {"task": task, "schedule": every, "options": {"expires": 2 * every}} for name, task, every in BEAT
}
app.autodiscover_tasks(["worker"], related_name="tasks")
