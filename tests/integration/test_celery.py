"""A real Celery worker on the real Redis broker runs the beat task and writes through the services."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
from django.utils import timezone

from apps.inventory.models import Cluster, DeviceEvent, Node
from tests.fixtures.jobs import submit_whole_cards
from tests.fixtures.waiting import wait_until
from worker.celery import app
from worker.tasks import node_staleness_check_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_the_broker_is_redis_in_tests():
    assert app.conf.broker_url.startswith("redis://")


def test_a_worker_flags_a_silent_node_once_even_when_the_task_runs_twice(settings):
    cluster = Cluster.objects.create(name="Prod", slug="prod")
    silent = Node.objects.create(
        cluster=cluster, name="silent", last_report_at=timezone.now() - timedelta(hours=2)
    )
    Node.objects.create(cluster=cluster, name="fresh", last_report_at=timezone.now())
    Node.objects.create(cluster=cluster, name="never-reported")
    runs = []

    def count_run(task=None, **_):
        if task is not None and task.name == node_staleness_check_task.name:
            runs.append(task.request.id)

    task_postrun.connect(count_run, weak=False)
    try:
        with start_worker(
            app, pool="solo", perform_ping_check=False, queues=["ingest", "default"], loglevel="WARNING"
        ):
            node_staleness_check_task.delay()
            node_staleness_check_task.delay()
            wait_until(lambda: len(runs) >= 2, timeout=20, step=0.1, what="both deliveries to run")
    finally:
        task_postrun.disconnect(count_run)
    events = DeviceEvent.objects.filter(kind="report_overdue")
    assert [e.node_id for e in events] == [silent.pk]
    silent.refresh_from_db()
    assert silent.report_overdue_since is not None


def test_the_beat_schedule_names_registered_tasks():
    for entry in app.conf.beat_schedule.values():
        assert entry["task"] in app.tasks


def test_the_next_report_clears_the_overdue_flag_with_an_event():
    from apps.inventory.services.discovery import node_report_ingest
    from apps.inventory.services.health import node_staleness_check
    from tests.inventory.test_discovery import gpu_csv, uuids

    cluster = Cluster.objects.create(name="Prod", slug="prod")
    node = Node.objects.create(
        cluster=cluster, name="gpu-a01", last_report_at=timezone.now() - timedelta(hours=1)
    )
    assert node_staleness_check(actor="test") == {"flagged": 1}
    assert node_staleness_check(actor="test") == {"flagged": 0}
    node_report_ingest(node_name="gpu-a01", kind="nvidia-smi-csv", text=gpu_csv(uuids(1)), actor="agent:prod")
    node.refresh_from_db()
    assert node.report_overdue_since is None
    assert DeviceEvent.objects.filter(node=node, kind="reports_resumed").count() == 1


def test_a_task_is_published_to_its_own_queue_only():
    """Each queue has its own routing key: a routed task lands in one queue, not in all of them."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queues = ("default", "scheduler", "push", "ingest", "billing")
    client.delete(*queues)
    with app.connection_for_write() as conn:
        node_staleness_check_task.apply_async(connection=conn)
    lengths = {q: client.llen(q) for q in queues}
    client.delete(*queues)
    assert lengths == {"default": 0, "scheduler": 0, "push": 0, "ingest": 1, "billing": 0}


def test_a_submission_asks_for_a_cycle_and_the_worker_schedules_it(make_user, make_project):
    """Submit → on_commit enqueues a cycle on the scheduler queue → a real worker places the job."""
    from datetime import date
    from decimal import Decimal

    from apps.catalog.models import ComputeCoefficient, DeviceModel
    from apps.inventory.models import Device
    from apps.jobs.models import Job, JobState

    model = DeviceModel.objects.create(vendor="nvidia", kind="gpu", name="T4", slug="t4", memory_mib=15360)
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("0.2083"), effective_from=date(2024, 1, 1)
    )
    cluster = Cluster.objects.create(name="Prod", slug="prod")
    node = Node.objects.create(cluster=cluster, name="t4-01")
    Device.objects.create(node=node, vendor="nvidia", index=0, uuid="GPU-t4-0", device_model=model)
    user = make_user("alice")
    project = make_project("vision", members=[user])
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["scheduler"], loglevel="WARNING"):
        job = submit_whole_cards(project, user, model, name="infer")
        wait_until(lambda: Job.objects.get(pk=job.pk).state == JobState.SCHEDULED, timeout=20, step=0.1)
