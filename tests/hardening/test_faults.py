"""Fault injection: a worker killed in the middle of a push, Redis down during a burst of submissions,
the PostgreSQL connection dropped during a scheduling cycle, the Kubernetes API down for minutes.

Everything is real: PostgreSQL, Redis (database 11 of the local server is reserved for these tests;
the real server is never stopped — "Redis down" points the broker at a closed port), Celery worker
subprocesses, and the fake Kubernetes API server over HTTP (tests/kube/fake_apiserver/).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from django.db import connection, connections
from django.utils import timezone

from apps.clusters.models import PushAction
from apps.core import task_names
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.scheduling.models import DecisionTrace
from apps.scheduling.push import push_pending_run
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.fixtures.waiting import wait_until
from tests.kube.helpers import fake_server_fixture, kube_cluster_at

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
BROKER = "redis://127.0.0.1:6379/11"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@contextmanager
def celery_broker(url: str):
    """Publish from this process to ``url`` (a fresh connection pool), then restore the test broker."""
    from worker.celery import app

    def reset():
        # kombu keeps one connection pool per broker URL (kombu.pools): forget ours, close nothing.
        app._pool = None
        if "amqp" in app.__dict__:
            app.__dict__["amqp"]._producer_pool = None

    old = app.conf.broker_url
    reset()
    app.conf.broker_url = url
    try:
        yield app
    finally:
        reset()
        app.conf.broker_url = old


@contextmanager
def celery_worker(*queues: str):
    """A real worker process (prefork, one child) on the hardening broker and the test database."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.hardening.worker_settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "CELERY_BROKER_URL": BROKER,
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "worker.celery",
            "worker",
            "-Q",
            ",".join(queues),
            "-c",
            "1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed as a whole, by its id
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def broker():
    client = redis.Redis.from_url(BROKER)
    client.flushdb()
    yield client
    client.flushdb()


server = fake_server_fixture(timeout_delay=60)


@pytest.fixture
def kube_cluster(fleet, server, tmp_path):
    return kube_cluster_at(server, tmp_path)


def submit(tenants, a100, name: str) -> Job:
    return submit_whole_cards(tenants["project"], tenants["member"], a100, name=name, image="pytorch:2.3")


def test_a_worker_killed_in_the_middle_of_a_push_is_redelivered_without_duplicates(
    broker, server, kube_cluster, tenants, a100
):
    # The API server creates the Job, then holds its answer: the worker is inside the network call.
    server.inject(r"/jobs$", status="timeout", times=1, method="POST")
    with celery_broker(BROKER):
        job = submit(tenants, a100, "train")
        scheduling_cycle_run()  # commits the outbox; on_commit publishes push_stream_task("job:<id>")
        job.refresh_from_db()
        assert job.state == JobState.SCHEDULED
        workload = PushAction.objects.get(job=job, kind="Job")

        with celery_worker("push") as first:
            assert wait_until(lambda: len(server.objects("Job")) == 1)
            workload.refresh_from_db()
            assert workload.state == PushAction.State.PENDING and workload.attempts == 0
            os.killpg(first.pid, signal.SIGKILL)  # crash between the network call and the DB update
            first.wait(timeout=10)
        # The message was not acknowledged (acks_late): it waits in Redis for redelivery.
        assert broker.hlen("unacked") == 1

        with celery_worker("push"):
            assert wait_until(
                lambda: PushAction.objects.get(pk=workload.pk).state == PushAction.State.APPLIED, timeout=60
            )
    workload.refresh_from_db()
    assert workload.result["action"] == "unchanged"  # 409 → compared → already there
    assert len(server.objects("Job")) == 1 and len(server.objects("Namespace")) == 1
    posts = [path for method, path in server.requests if method == "POST" and path.endswith("/jobs")]
    assert len(posts) == 2  # the interrupted create and the redelivered one: one object
    assert broker.hlen("unacked") == 0


def test_submissions_during_a_redis_outage_are_scheduled_once_redis_is_back(
    broker, fleet, tenants, a100, api_client
):
    api_client.force_authenticate(tenants["member"])
    body = {"project": "secretvision", "image": "pytorch:2.3", "request_kind": "whole_cards"}
    body["device_model"] = a100.slug
    ids = []
    with celery_broker(f"redis://127.0.0.1:{closed_port()}/0"):
        for i in range(6):
            response = api_client.post("/api/jobs/jobs/", {**body, "name": f"burst-{i}"}, format="json")
            assert response.status_code == 201, response.content  # the broker being down fails nothing
            ids.append(response.json()["id"])
    # Recorded in PostgreSQL, nothing scheduled (no cycle could be requested), nothing in the broker.
    assert Job.objects.filter(pk__in=ids, state=JobState.PENDING).count() == 6
    assert broker.llen("scheduler") == 0

    # Redis is back: beat's periodic cycle reaches a real worker, which schedules every one of them.
    with celery_broker(BROKER) as app, celery_worker("scheduler"):
        app.send_task(task_names.SCHEDULING_CYCLE, queue="scheduler")
        assert wait_until(
            lambda: Job.objects.filter(pk__in=ids, state=JobState.SCHEDULED).count() == 6, timeout=60
        )
    assert Allocation.objects.filter(job_id__in=ids, released_at__isnull=True).count() == 6
    assert len(set(Allocation.objects.filter(job_id__in=ids).values_list("device_id", flat=True))) == 6


STALL = """
CREATE OR REPLACE FUNCTION hardening_stall() RETURNS trigger AS $$
BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE TRIGGER hardening_stall BEFORE INSERT ON scheduling_pushaction
FOR EACH STATEMENT EXECUTE FUNCTION hardening_stall();
"""
UNSTALL = "DROP TRIGGER IF EXISTS hardening_stall ON scheduling_pushaction; DROP FUNCTION IF EXISTS hardening_stall();"


def test_a_connection_dropped_during_a_scheduling_cycle_rolls_back_cleanly(fleet, tenants, a100):
    jobs = [submit(tenants, a100, f"train-{i}") for i in range(3)]
    # The cycle's transaction stalls on its last writes (the outbox), after allocations, traces,
    # events and job states were written; then its backend is terminated from this connection.
    with connection.cursor() as cursor:
        cursor.execute(STALL)
    outcome: dict = {}

    def cycle():
        try:
            outcome["result"] = scheduling_cycle_run()
        except Exception as e:  # noqa: BLE001 - the error is the point of the test
            outcome["error"] = e
        finally:
            connections.close_all()

    try:
        thread = threading.Thread(target=cycle)
        thread.start()
        with connection.cursor() as cursor:

            def stalled_pid():
                cursor.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
                )
                row = cursor.fetchone()
                return row[0] if row else None

            assert wait_until(lambda: stalled_pid() is not None, timeout=30)
            pid = stalled_pid()
            # The stalled transaction has written rows already (it holds a transaction id).
            cursor.execute("SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = %s", [pid])
            assert cursor.fetchone()[0] is True
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        thread.join(timeout=30)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(UNSTALL)

    assert "error" in outcome, outcome  # the cycle saw its connection go
    # Nothing half-written: no allocation, trace, scheduling event or outbox row; every job pending.
    ids = [j.pk for j in jobs]
    assert Allocation.objects.count() == 0
    assert PushAction.objects.count() == 0
    assert DecisionTrace.objects.filter(job_id__in=ids).count() == 0
    assert JobEvent.objects.filter(job_id__in=ids).exclude(kind=JobEvent.Kind.SUBMITTED).count() == 0
    assert set(Job.objects.filter(pk__in=ids).values_list("state", "attempt")) == {(JobState.PENDING, 0)}

    # The next cycle (a fresh connection) schedules every job exactly once.
    result = scheduling_cycle_run()
    assert sorted(result.placed_job_ids) == ids
    assert Allocation.objects.count() == 3
    assert PushAction.objects.filter(kind="Job").count() == 3


def test_the_kubernetes_api_down_for_minutes_queues_decisions_and_applies_them_later_in_order(
    server, kube_cluster, tenants, a100
):
    jobs = [submit(tenants, a100, f"train-{i}") for i in range(3)]
    scheduling_cycle_run()
    server.inject(r".", status=503, times=10_000)  # every request: 503 Service Unavailable
    now = timezone.now()
    # Five simulated minutes of outage: the periodic push every 10 s, the scheduler every 10 s.
    for _ in range(30):
        push_pending_run(now=now)
        scheduling_cycle_run()
        now += dt.timedelta(seconds=10)
    assert server.objects("Job") == [] and server.objects("Namespace") == []
    # Every decision is still queued: scheduled with pending actions, or back in the queue for the
    # next attempt (a push that failed five times returns the job to the queue, never loses it).
    states = set(Job.objects.values_list("state", flat=True))
    assert states <= {JobState.SCHEDULED, JobState.PENDING}
    assert PushAction.objects.filter(state=PushAction.State.APPLIED).count() == 0

    with server._lock:  # the API is back
        server._faults.clear()
        back = len(server.requests)
    for _ in range(40):
        push_pending_run(now=now)
        scheduling_cycle_run()
        now += dt.timedelta(seconds=10)
        if (
            Job.objects.filter(state=JobState.SCHEDULED).count() == 3
            and not PushAction.objects.filter(state=PushAction.State.PENDING).exists()
        ):
            break
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.SCHEDULED}
    # One workload per job (its current attempt), one namespace, nothing duplicated.
    names = sorted(o["metadata"]["name"] for o in server.objects("Job"))
    assert names == sorted(f"suanchi-{j.pk}-a{Job.objects.get(pk=j.pk).attempt}" for j in jobs)
    assert len(server.objects("Namespace")) == 1
    # In order: after the outage the namespace is created before any workload.
    posts = [path for method, path in server.requests[back:] if method == "POST"]
    assert posts[0].endswith("/namespaces") and sum(p.endswith("/jobs") for p in posts) == 3
    for job in jobs:
        job.refresh_from_db()
        applied = list(
            PushAction.objects.filter(job=job, attempt=job.attempt)
            .order_by("seq")
            .values_list("state", "applied_at")
        )
        assert [s for s, _ in applied] == [PushAction.State.APPLIED] * len(applied)
        times = [t for _, t in applied]
        assert times == sorted(times)
    assert Allocation.objects.filter(released_at__isnull=True).count() == 3
