"""The Celery application: queues per concern, one beat schedule in code."""

import os

from celery import Celery
from kombu import Exchange, Queue

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
    "worker.tasks.telemetry.*": {"queue": "ingest"},
    "worker.tasks.billing.*": {"queue": "billing"},
    "worker.tasks.rollout.*": {"queue": "default"},
    "worker.tasks.migration.*": {"queue": "default"},
}
app.conf.beat_schedule = {
    "scheduling-cycle": {
        "task": "worker.tasks.scheduling.scheduling_cycle_task",
        "schedule": 5.0,
        "options": {"expires": 10},
    },
    "push-pending": {
        "task": "worker.tasks.push.push_pending_task",
        "schedule": 10.0,
        "options": {"expires": 20},
    },
    "reconcile": {
        "task": "worker.tasks.reconcile.reconcile_task",
        "schedule": 10.0,
        "options": {"expires": 20},
    },
    "telemetry-ingest": {
        "task": "worker.tasks.telemetry.telemetry_ingest_task",
        "schedule": 60.0,
        "options": {"expires": 120},
    },
    "billing-meter": {
        "task": "worker.tasks.billing.metering_task",
        "schedule": 900.0,
        "options": {"expires": 1800},
    },
    "rollout-evaluate": {
        "task": "worker.tasks.rollout.rollout_evaluate_task",
        "schedule": 300.0,
        "options": {"expires": 600},
    },
    "migration-gates": {
        "task": "worker.tasks.migration.gates_evaluate_task",
        "schedule": 900.0,
        "options": {"expires": 1800},
    },
    "autoscale": {
        "task": "worker.tasks.rollout.autoscale_task",
        "schedule": 60.0,
        "options": {"expires": 120},
    },
    "inventory-mark-stale-nodes": {
        "task": "worker.tasks.inventory.node_staleness_check_task",
        "schedule": 300.0,
    },
}
app.autodiscover_tasks(["worker"], related_name="tasks")
