"""The Celery application: queues per concern, one beat schedule in code."""

import os

from celery import Celery
from kombu import Exchange, Queue

from apps.core import task_names
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
# Routes by pattern over the task names (apps.core.task_names: "worker.tasks.<family>.<task>").
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
# (entry, task name from apps.core.task_names, every N seconds). A run not started within two periods
# is dropped (``expires``): the next one does the same work, so a backlog after an outage never replays.
BEAT = [
    ("scheduling-cycle", task_names.SCHEDULING_CYCLE, 5.0),
    # push and reconcile fan out: one task per cluster, so a cluster that hangs delays only itself
    ("push-pending", task_names.PUSH_CLUSTERS, 10.0),
    ("reconcile", task_names.RECONCILE, 10.0),
    ("cluster-sync", task_names.CLUSTER_SYNC, 300.0),
    ("telemetry-ingest", task_names.TELEMETRY_INGEST, 60.0),
    ("autoscale", task_names.AUTOSCALE, 60.0),
    ("rollout-evaluate", task_names.ROLLOUT_EVALUATE, 300.0),
    ("inventory-mark-stale-nodes", task_names.NODE_STALENESS_CHECK, 300.0),
    ("billing-meter", task_names.METERING, 900.0),
    ("migration-gates", task_names.GATES_EVALUATE, 900.0),
    # the outbox's safety net: deliveries whose after-commit task was lost, and retries that are due
    ("notify-send", task_names.DELIVERIES_SEND, 30.0),
    ("notify-quota-check", task_names.QUOTA_CHECK, 600.0),
    # alert rules on measurements (hysteresis in apps/notify/alerts.py): one evaluation a minute
    ("notify-alerts", task_names.ALERTS_EVALUATE, 60.0),
]
app.conf.beat_schedule = {
    name: {"task": task, "schedule": every, "options": {"expires": 2 * every}} for name, task, every in BEAT
}
app.autodiscover_tasks(["worker"], related_name="tasks")
