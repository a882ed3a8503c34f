"""The chips the Ascend device plugin names on a pod (``huawei.com/AscendReal``) reach the ledger:
the worker's reconcile pass hands the pods it listed to ``readback`` (its caller's callable), and
telemetry's ``plugin_readback`` moves the allocation to the chip the pod got."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.inventory.models import Cluster
from apps.jobs.models import JobEvent
from apps.scheduling.reconcile import reconcile_cluster
from apps.telemetry.plugin_readback import plugin_readback
from tests.fixtures.telemetry import allocate
from tests.fixtures.telemetry import make_job as db_job
from tests.kube.test_ascend_names import REAL_ONE, npu_node, pod
from tests.kube.test_reconcile import schedule_and_push, submit

__all__ = ["npu_node"]


def test_the_readback_of_a_pass_moves_the_allocation_to_the_chip_the_plugin_gave(npu_node, make_project):
    cluster, _node, cards = npu_node
    job = db_job(make_project("vision"))
    alloc = allocate(job, cards[0], start=timezone.now() - timedelta(hours=1))
    pods = [pod(job, f"suanchi-{job.pk}-a0-x7k2p", REAL_ONE)]

    assert plugin_readback(cluster=cluster, pods=pods, now=timezone.now()) is not None

    alloc.refresh_from_db()
    assert alloc.device_id == cards[3].pk
    assert JobEvent.objects.filter(job=job, data__readback="moved").count() == 1
    # The next pass sees the same annotation: the ledger already matches.
    plugin_readback(cluster=cluster, pods=pods, now=timezone.now())
    assert JobEvent.objects.filter(job=job, data__readback="moved").count() == 1


def test_pods_without_the_annotation_move_nothing(npu_node, make_project):
    cluster, _node, cards = npu_node
    job = db_job(make_project("vision"))
    alloc = allocate(job, cards[0], start=timezone.now() - timedelta(hours=1))
    assert (
        plugin_readback(cluster=cluster, pods=[pod(job, f"suanchi-{job.pk}-a0-x", None)], now=timezone.now())
        is None
    )
    alloc.refresh_from_db()
    assert alloc.device_id == cards[0].pk and not JobEvent.objects.filter(data__readback="moved").exists()


def test_a_reconcile_pass_hands_the_pods_it_listed_to_its_readback(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100))
    cluster = Cluster.objects.get(slug="prod")
    seen: list[dict] = []

    def capture(*, cluster, pods, now, actor):
        seen.append({"cluster": cluster.slug, "pods": [p["metadata"]["name"] for p in pods], "actor": actor})

    from apps.clusters.connections import backend_for

    backend_for(cluster).advance(6)
    reconcile_cluster(cluster=cluster, actor="reconciler", readback=capture)
    (call,) = seen
    assert call["cluster"] == "prod" and call["actor"] == "reconciler"
    assert any(name.startswith(f"suanchi-{job.pk}") for name in call["pods"]), call


def test_a_failing_readback_is_logged_and_the_pass_goes_on(fleet, member_project, a100, caplog):
    user, project = member_project
    schedule_and_push(submit(project, user, a100))
    cluster = Cluster.objects.get(slug="prod")

    def broken(**_):
        raise RuntimeError("boom")

    result = reconcile_cluster(cluster=cluster, actor="reconciler", readback=broken)
    assert result.checked == 1 and not result.list_error
    assert "pod read-back broken failed" in caplog.text


def test_the_worker_task_passes_telemetrys_readback(monkeypatch):
    import worker.tasks.reconcile as tasks

    calls = []
    monkeypatch.setattr(tasks, "reconcile_cluster_run", lambda **kw: calls.append(kw) or {})
    tasks.reconcile_cluster_task.run(7)
    assert calls == [{"cluster_id": 7, "actor": "reconciler", "readback": plugin_readback}]
