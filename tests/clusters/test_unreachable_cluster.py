"""An unreachable cluster (issue 27 §8): one warning line per state change, never a traceback per
pass, and pushes to it held with the reason while it does not answer, sent once it answers again.

The cluster's API server is a real closed port on 127.0.0.1 (nothing listens there), then the fake
API server; every call goes through the official client."""

from __future__ import annotations

import datetime as dt
import logging
import socket

import pytest
from django.utils import timezone

from apps.clusters.backends.kubernetes import KubernetesBackend
from apps.clusters.models import PushAction
from apps.clusters.outbox import push_object_enqueue
from apps.inventory.models import Cluster
from apps.scheduling.push import push_cluster_run, push_stream_run
from apps.scheduling.reconcile import reconcile_cluster_run
from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for
from worker.tasks.clusters import cluster_sync_task

pytestmark = pytest.mark.django_db

QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "suanchi-quota", "namespace": "team"},
    "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
}


class ClosedPort:
    """Where nothing listens: a port bound and closed again."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"


def point_at(cluster: Cluster, server, tmp_path) -> None:
    directory = tmp_path / str(server.port)
    directory.mkdir(exist_ok=True)
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig_path=str(kubeconfig_for(server, directory)))
    cluster.refresh_from_db()


def health_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "apps.clusters.health"]


def test_an_unreachable_cluster_says_so_once_holds_its_pushes_and_resumes(tmp_path, caplog):
    cluster = Cluster.objects.create(name="Edge", slug="edge", backend=Cluster.Backend.KUBERNETES)
    point_at(cluster, ClosedPort(), tmp_path)
    caplog.set_level(logging.WARNING)

    # Two failing reconcile passes and two periodic syncs (through Celery's tracer, as the worker
    # runs them): one warning line, no traceback.
    for _ in range(2):
        assert "could not connect" in reconcile_cluster_run(cluster_id=cluster.pk, force=True)["list_error"]
    for _ in range(2):
        (report,) = cluster_sync_task.apply(args=[cluster.pk]).get()
        assert "could not connect" in report["error"]
    lines = health_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("cluster edge is unreachable (reconcile): ")
    assert "\n" not in lines[0]
    assert all(r.exc_info is None and r.levelno < logging.ERROR for r in caplog.records)
    assert "Traceback" not in caplog.text

    # A quota pushed after commit (push_stream_task's run): held, not attempted, with the reason.
    action = push_object_enqueue(cluster=cluster, manifest=QUOTA)
    summary = push_stream_run(stream=action.stream)
    action.refresh_from_db()
    assert summary["held"] == 1 and summary["applied"] == summary["failed"] == 0
    assert action.state == PushAction.State.PENDING and action.attempts == 0
    assert action.last_error.startswith("held: cluster edge is unreachable (")
    assert action.last_error.endswith("); sent once it answers again")

    # The periodic per-cluster push keeps probing at its backoff; an outage never fails the quota.
    start = timezone.now()
    for i in range(7):
        run = push_cluster_run(cluster_id=cluster.pk, force=True, now=start + dt.timedelta(minutes=10 * i))
        assert "could not connect" in run["unreachable"]
    action.refresh_from_db()
    assert action.state == PushAction.State.PENDING and action.attempts == 7
    assert action.last_error.startswith("held: cluster edge is unreachable (")
    assert len(health_lines(caplog)) == 1

    # It answers again: the held quota is sent, one line says so.
    with FakeApiServer(controllers=False) as server:
        point_at(cluster, server, tmp_path)
        ns = KubernetesBackend(cluster)
        ns.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        ns.close()
        later = start + dt.timedelta(hours=3)
        assert push_cluster_run(cluster_id=cluster.pk, force=True, now=later)["unreachable"] == ""
        action.refresh_from_db()
        assert action.state == PushAction.State.APPLIED and action.last_error == ""
        assert [q["metadata"]["name"] for q in server.objects("ResourceQuota", "team")] == ["suanchi-quota"]
        assert reconcile_cluster_run(cluster_id=cluster.pk, force=True).get("list_error", "") == ""
    lines = health_lines(caplog)
    assert len(lines) == 2 and lines[1].startswith("cluster edge is reachable again")
    assert "Traceback" not in caplog.text


def test_a_cluster_only_synced_says_once_that_its_sync_fails_and_once_that_it_works(tmp_path, caplog):
    cluster = Cluster.objects.create(name="Lab", slug="lab", backend=Cluster.Backend.KUBERNETES)
    point_at(cluster, ClosedPort(), tmp_path)
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        (report,) = cluster_sync_task.apply(args=[cluster.pk]).get()
        assert "could not connect" in report["error"]
    assert health_lines(caplog) == [health_lines(caplog)[0]]
    assert health_lines(caplog)[0].startswith("cluster lab: sync fails: list nodes: ")
    with FakeApiServer(controllers=False) as server:
        server.add_node("gpu-01")
        point_at(cluster, server, tmp_path)
        for _ in range(2):
            (report,) = cluster_sync_task.apply(args=[cluster.pk]).get()
            assert report["nodes"] == 1
    assert health_lines(caplog)[1:] == ["cluster lab: sync works again"]
    assert all(r.exc_info is None for r in caplog.records) and "Traceback" not in caplog.text
