"""The chips the Ascend device plugin names on a pod (``huawei.com/AscendReal``) reach the ledger:
each reconcile pass sends the pods it listed (``apps.clusters.signals.pods_listed``) and the telemetry
app's receiver moves the allocation to the chip the pod got (``apps.telemetry.plugin_readback``)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.clusters.signals import pods_listed
from apps.inventory.models import Cluster
from apps.jobs.models import JobEvent
from apps.scheduling.reconcile import reconcile_cluster
from tests.jobs import conftest as jobs_fixtures
from tests.kube.test_ascend_names import REAL_ONE, npu_node, pod
from tests.kube.test_reconcile import schedule_and_push, submit
from tests.telemetry.conftest import allocate
from tests.telemetry.conftest import make_job as db_job

a100 = jobs_fixtures.a100
ascend = jobs_fixtures.ascend
fleet = jobs_fixtures.fleet
member_project = jobs_fixtures.member_project
__all__ = ["npu_node"]


def test_the_signal_of_a_pass_moves_the_allocation_to_the_chip_the_plugin_gave(npu_node, make_project):
    cluster, _node, cards = npu_node
    job = db_job(make_project("vision"))
    alloc = allocate(job, cards[0], start=timezone.now() - timedelta(hours=1))
    pods = [pod(job, f"suanchi-{job.pk}-a0-x7k2p", REAL_ONE)]

    answers = pods_listed.send_robust(sender=Cluster, cluster=cluster, pods=pods, now=timezone.now())

    outcomes = [o for _r, o in answers if o is not None]
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    alloc.refresh_from_db()
    assert alloc.device_id == cards[3].pk
    assert JobEvent.objects.filter(job=job, data__readback="moved").count() == 1
    # The next pass sees the same annotation: the ledger already matches.
    pods_listed.send_robust(sender=Cluster, cluster=cluster, pods=pods, now=timezone.now())
    assert JobEvent.objects.filter(job=job, data__readback="moved").count() == 1


def test_pods_without_the_annotation_move_nothing(npu_node, make_project):
    cluster, _node, cards = npu_node
    job = db_job(make_project("vision"))
    alloc = allocate(job, cards[0], start=timezone.now() - timedelta(hours=1))
    pods_listed.send_robust(
        sender=Cluster, cluster=cluster, pods=[pod(job, f"suanchi-{job.pk}-a0-x", None)], now=timezone.now()
    )
    alloc.refresh_from_db()
    assert alloc.device_id == cards[0].pk and not JobEvent.objects.filter(data__readback="moved").exists()


def test_a_reconcile_pass_sends_the_pods_it_listed(fleet, member_project, a100):
    user, project = member_project
    job = schedule_and_push(submit(project, user, a100))
    cluster = Cluster.objects.get(slug="prod")
    seen: list[dict] = []

    def capture(sender, *, cluster, pods, now, actor, **_):
        seen.append({"cluster": cluster.slug, "pods": [p["metadata"]["name"] for p in pods], "actor": actor})

    pods_listed.connect(capture, dispatch_uid="test.capture")
    try:
        from apps.clusters.connections import backend_for

        backend_for(cluster).advance(6)
        reconcile_cluster(cluster=cluster, actor="reconciler")
    finally:
        pods_listed.disconnect(dispatch_uid="test.capture")
    (call,) = seen
    assert call["cluster"] == "prod" and call["actor"] == "reconciler"
    assert any(name.startswith(f"suanchi-{job.pk}") for name in call["pods"]), call
