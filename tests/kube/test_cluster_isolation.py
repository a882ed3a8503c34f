"""One cluster's outage never stalls the others: per-cluster reconcile and push, each under its own
lock, with bounded client timeouts; a failing cluster is marked, backs off and shows on its pages.

Two clusters, each its own fake API server over HTTP; the failing one is then pointed at a local TCP
server that accepts connections and never answers (an API server that hangs), or at a closed port
(refused)."""

from __future__ import annotations

import datetime as dt
import socket
import threading
from unittest import mock

import pytest
from django.db import connection
from django.utils import timezone

from apps.clusters.health import BACKOFF_BASE_S, cluster_health
from apps.clusters.models import ClusterLoop, PushAction
from apps.clusters.pusher import push_due_clusters
from apps.core.models import ChangeRecord
from apps.inventory.models import Cluster, Pool
from apps.jobs.models import Allocation, JobState
from apps.scheduling.push import push_cluster_run, push_job_run
from apps.scheduling.reconcile import RECONCILE_LOCK, reconcile_cluster_run, reconcile_due_clusters
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for
from tests.kube.helpers import nvidia_node
from worker.tasks.push import push_cluster_task, push_clusters_task, push_streams_task
from worker.tasks.reconcile import RECONCILE_PERIOD_S, reconcile_cluster_task, reconcile_task


class SilentServer:
    """A TCP server that accepts every connection and never answers (a hung API server) until
    ``release()`` closes the connections it holds. Has ``url``/``port`` like FakeApiServer, so
    ``kubeconfig_for`` can point a cluster at it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.connections: list[socket.socket] = []
        self.accepted = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)
            self.accepted.set()

    def release(self) -> None:
        for conn in self.connections:
            conn.close()  # the client's read ends: "connection closed without an answer"

    def stop(self) -> None:
        self.release()
        self.sock.close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once it is closed


class _Refusing:
    def __init__(self) -> None:
        self.url = closed_port_url()
        self.port = int(self.url.rsplit(":", 1)[1])


def point_at(cluster: Cluster, server, tmp_path) -> None:
    directory = tmp_path / f"{cluster.slug}-{server.port}"
    directory.mkdir(exist_ok=True)
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig_path=str(kubeconfig_for(server, directory)))
    cluster.refresh_from_db()


@pytest.fixture
def servers():
    healthy, other = FakeApiServer().start(), FakeApiServer().start()
    yield healthy, other
    healthy.stop()
    other.stop()


@pytest.fixture
def clusters(fleet, a100, servers, tmp_path):
    """prod (gpu-01, gpu-02; healthy server) and edge (gpu-e1, gpu-e2; the other server)."""
    healthy, other = servers
    prod = Cluster.objects.get(slug="prod")
    prod.backend = Cluster.Backend.KUBERNETES
    prod.save()
    point_at(prod, healthy, tmp_path)
    for name in fleet:
        healthy.add_node(name)
    edge = Cluster.objects.create(name="Edge", slug="edge", backend=Cluster.Backend.KUBERNETES)
    point_at(edge, other, tmp_path)
    pool = Pool.objects.create(cluster=edge, name="training", slug="training")
    for name in ("gpu-e1", "gpu-e2"):
        nvidia_node(edge, pool, name, a100, 4)
        other.add_node(name)
    return prod, edge


def submit_whole_nodes(project, user, a100, n: int):
    jobs = [
        submit_whole_cards(
            project, user, a100, 4, name=f"train-{i}", image="pytorch:2.3", expected_duration_s=600
        )
        for i in range(n)
    ]
    result = scheduling_cycle_run()
    assert set(result.placed_job_ids) == {j.pk for j in jobs}, result.as_dict()
    return jobs


def jobs_on(cluster, jobs):
    ids = set(
        Allocation.objects.filter(job__in=jobs, node__cluster=cluster, released_at__isnull=True).values_list(
            "job_id", flat=True
        )
    )
    return [j for j in jobs if j.pk in ids]


def run_pods(server, jobs):
    for job in jobs:
        w = PushAction.objects.get(job=job, attempt=job.attempt, kind="Job")
        for pod in server.objects("Pod", w.namespace):
            if pod["metadata"]["labels"].get("job-name") == w.name:
                server.set_pod_phase(w.namespace, pod["metadata"]["name"], "Running")


@pytest.fixture
def pushed(clusters, servers, member_project, a100):
    """Two running-ready jobs on each cluster, pushed while both API servers answered."""
    user, project = member_project
    prod, edge = clusters
    jobs = submit_whole_nodes(project, user, a100, 4)
    for job in jobs:
        assert push_job_run(job_id=job.pk)["failed"] == 0
        job.refresh_from_db()
    on_prod, on_edge = jobs_on(prod, jobs), jobs_on(edge, jobs)
    assert len(on_prod) == 2 and len(on_edge) == 2
    run_pods(servers[0], on_prod)
    run_pods(servers[1], on_edge)
    return on_prod, on_edge


def states(jobs):
    for job in jobs:
        job.refresh_from_db()
    return [job.state for job in jobs]


def loop_of(cluster, loop=ClusterLoop.Loop.RECONCILE):
    return ClusterLoop.objects.get(cluster=cluster, loop=loop)


# -- reconcile ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_hanging_cluster_does_not_hold_up_the_healthy_one_and_never_runs_twice(clusters, pushed, tmp_path):
    prod, edge = clusters
    on_prod, on_edge = pushed
    silent = SilentServer()
    point_at(edge, silent, tmp_path)
    out: dict = {}

    def hanging_pass():
        try:
            # A generous timeout: this pass is held until the test releases the server.
            out["edge"] = reconcile_cluster_run(cluster_id=edge.pk, timeout=60)
        finally:
            connection.close()

    worker = threading.Thread(target=hanging_pass)
    worker.start()
    try:
        assert silent.accepted.wait(30), "the edge pass never called its API server"
        # Same period, another worker: the healthy cluster's pass completes and its jobs progress.
        result = reconcile_cluster_run(cluster_id=prod.pk)
        assert result["running"] == 2 and result["list_error"] == ""
        assert states(on_prod) == [JobState.RUNNING, JobState.RUNNING]
        assert worker.is_alive()  # ... while the edge pass still waits on its API server
        # A second pass over the hanging cluster does not run beside the first one.
        assert reconcile_cluster_run(cluster_id=edge.pk) == {
            "cluster": "edge",
            "skipped": "another reconcile of this cluster is running",
        }
    finally:
        silent.release()
        worker.join(30)
        silent.stop()
    assert not worker.is_alive()
    assert out["edge"]["list_error"] and out["edge"]["running"] == 0
    assert states(on_edge) == [JobState.SCHEDULED, JobState.SCHEDULED]  # untouched, not failed
    edge_loop, prod_loop = loop_of(edge), loop_of(prod)
    assert edge_loop.consecutive_failures == 1 and edge_loop.last_success_at is None
    assert edge_loop.next_attempt_at > timezone.now()
    assert prod_loop.consecutive_failures == 0 and prod_loop.last_success_at is not None
    # The next period: the healthy cluster is due, the failed one backs off.
    assert reconcile_due_clusters() == ([prod.pk], [edge.pk])


def test_the_lock_is_per_cluster(clusters, pushed):
    from apps.core.locks import try_lock

    prod, edge = clusters
    with try_lock(RECONCILE_LOCK % edge.pk, holder="another worker") as taken:
        assert taken
        assert reconcile_cluster_run(cluster_id=edge.pk)["skipped"] == (
            "another reconcile of this cluster is running"
        )
        assert reconcile_cluster_run(cluster_id=prod.pk)["running"] == 2  # its own lock is free
    assert not ClusterLoop.objects.filter(cluster=edge).exists()  # the skipped pass recorded nothing
    assert reconcile_cluster_run(cluster_id=edge.pk)["running"] == 2  # released on exit


def test_a_silent_api_server_costs_one_bounded_timeout_then_backs_off_and_recovers(
    clusters, pushed, servers, tmp_path
):
    prod, edge = clusters
    on_prod, on_edge = pushed
    silent = SilentServer()
    try:
        point_at(edge, silent, tmp_path)
        first = reconcile_cluster_run(cluster_id=edge.pk, timeout=0.5)
        assert "timed out" in first["list_error"]
        # The four watched kinds (Job, Deployment, Pod, Node) are read at once, so they wait out
        # one bounded timeout together; after them the pass stopped: no further call waited.
        opened = len(silent.connections)
        assert opened == 4
        row = loop_of(edge)
        assert row.consecutive_failures == 1 and "timed out" in row.last_error
        wait = (row.next_attempt_at - row.last_failure_at).total_seconds()
        assert BACKOFF_BASE_S / 2 <= wait <= BACKOFF_BASE_S
        # Within the backoff the cluster is not tried again.
        assert (
            reconcile_cluster_run(cluster_id=edge.pk, timeout=0.5)["skipped"] == "backing off after failures"
        )
        assert len(silent.connections) == opened
        # Once due (forced here) it is tried, fails again and waits twice as long.
        reconcile_cluster_run(cluster_id=edge.pk, timeout=0.5, force=True)
        row = loop_of(edge)
        wait = (row.next_attempt_at - row.last_failure_at).total_seconds()
        assert row.consecutive_failures == 2 and BACKOFF_BASE_S <= wait <= 2 * BACKOFF_BASE_S
    finally:
        silent.stop()
    # The pages' view of it: unreachable, never reached; prod is not marked.
    reconcile_cluster_run(cluster_id=prod.pk)
    health = cluster_health([prod.pk, edge.pk])
    assert health[edge.pk].unreachable and health[edge.pk].last_success_at is None
    assert health[edge.pk].failures == 2 and health[edge.pk].loops == ("reconcile",)
    assert not health[prod.pk].unreachable

    # The API server answers again: the jobs progress, the marks go away, both changes audited.
    point_at(edge, servers[1], tmp_path)
    assert reconcile_cluster_run(cluster_id=edge.pk, force=True)["running"] == 2
    assert states(on_edge) == [JobState.RUNNING, JobState.RUNNING]
    row = loop_of(edge)
    assert row.consecutive_failures == 0 and row.next_attempt_at is None and row.last_success_at
    actions = list(
        ChangeRecord.objects.filter(object_id=str(edge.pk), action__startswith="cluster_")
        .order_by("created_at", "id")
        .values_list("action", flat=True)
    )
    assert actions == ["cluster_unreachable", "cluster_reachable"]


def test_a_refused_connection_marks_the_cluster_and_spares_the_other(clusters, pushed, tmp_path):
    prod, edge = clusters
    on_prod, _ = pushed
    point_at(edge, _Refusing(), tmp_path)
    assert reconcile_cluster_run(cluster_id=edge.pk)["list_error"]
    assert reconcile_cluster_run(cluster_id=prod.pk)["running"] == 2
    assert loop_of(edge).consecutive_failures == 1 and loop_of(prod).consecutive_failures == 0
    # No client at all (the kubeconfig is gone): marked the same way, the pass does not raise.
    Cluster.objects.filter(pk=edge.pk).update(kubeconfig_path=str(tmp_path / "missing.yaml"))
    assert "cannot load kubeconfig" in reconcile_cluster_run(cluster_id=edge.pk, force=True)["list_error"]
    assert loop_of(edge).consecutive_failures == 2


def test_the_beat_task_sends_one_reconcile_per_due_cluster(clusters, pushed, tmp_path):
    prod, edge = clusters
    with mock.patch.object(reconcile_cluster_task, "apply_async") as send:
        assert reconcile_task() == {"sent": [prod.pk, edge.pk], "backing_off": []}
    assert [c.kwargs for c in send.call_args_list] == [
        {"args": [prod.pk], "expires": RECONCILE_PERIOD_S},
        {"args": [edge.pk], "expires": RECONCILE_PERIOD_S},
    ]
    point_at(edge, _Refusing(), tmp_path)
    reconcile_cluster_task(edge.pk)  # the per-cluster task itself (run in-process here)
    with mock.patch.object(reconcile_cluster_task, "apply_async") as send:
        assert reconcile_task() == {"sent": [prod.pk], "backing_off": [edge.pk]}
    assert [c.kwargs["args"] for c in send.call_args_list] == [[prod.pk]]
    # Once the backoff ran out, it is sent again.
    later = timezone.now() + dt.timedelta(seconds=BACKOFF_BASE_S + 1)
    assert reconcile_due_clusters(now=later) == ([prod.pk, edge.pk], [])


# -- push -----------------------------------------------------------------------------------------


@pytest.fixture
def unpushed(clusters, member_project, a100):
    user, project = member_project
    prod, edge = clusters
    jobs = submit_whole_nodes(project, user, a100, 4)
    return jobs_on(prod, jobs), jobs_on(edge, jobs)


def workloads_applied(jobs):
    return [
        PushAction.objects.get(job=j, kind="Job", attempt=j.attempt).state == PushAction.State.APPLIED
        for j in jobs
    ]


def test_push_per_cluster_a_silent_cluster_stops_at_its_first_call(clusters, unpushed, servers, tmp_path):
    prod, edge = clusters
    on_prod, on_edge = unpushed
    silent = SilentServer()
    try:
        point_at(edge, silent, tmp_path)
        assert push_due_clusters() == ([prod.pk, edge.pk], [])
        edge_run = push_cluster_run(cluster_id=edge.pk, timeout=0.5)
        assert "timed out" in edge_run["unreachable"]
        assert len(silent.connections) == 1  # one call waited; the other streams were not tried
        tried = PushAction.objects.filter(cluster=edge, attempts__gt=0).count()
        assert tried == 1 and PushAction.objects.filter(cluster=edge, state="applied").count() == 0
        assert loop_of(edge, ClusterLoop.Loop.PUSH).consecutive_failures == 1
        # prod's push is its own task: everything of its jobs lands.
        assert push_cluster_run(cluster_id=prod.pk)["unreachable"] == ""
        assert workloads_applied(on_prod) == [True, True]
        assert len(servers[0].objects("Job")) == 2
        assert push_due_clusters()[1] == [edge.pk]
        with mock.patch.object(push_cluster_task, "apply_async") as send:
            assert push_clusters_task()["backing_off"] == [edge.pk]
        assert all(c.kwargs["args"] != [edge.pk] for c in send.call_args_list)
        # A scheduling batch's message naming edge's streams does not call the backing-off cluster.
        push_streams_task([f"job:{j.pk}" for j in on_edge])
        assert len(silent.connections) == 1
        assert PushAction.objects.filter(cluster=edge, attempts__gt=0).count() == tried
    finally:
        silent.stop()
    # Back: the next due push applies edge's jobs and clears the mark.
    point_at(edge, servers[1], tmp_path)
    later = timezone.now() + dt.timedelta(minutes=10)
    assert push_cluster_run(cluster_id=edge.pk, now=later, force=True)["unreachable"] == ""
    assert workloads_applied(on_edge) == [True, True]
    assert loop_of(edge, ClusterLoop.Loop.PUSH).consecutive_failures == 0


# -- pages ----------------------------------------------------------------------------------------


def test_the_cluster_pages_show_the_unreachable_cluster_and_since_when(
    clusters, pushed, admin_client, tmp_path
):
    prod, edge = clusters
    reconcile_cluster_run(cluster_id=edge.pk)  # reached once
    ClusterLoop.objects.filter(cluster=edge).update(last_success_at=timezone.now() - dt.timedelta(minutes=7))
    reconcile_cluster_run(cluster_id=prod.pk)
    point_at(edge, _Refusing(), tmp_path)
    reconcile_cluster_run(cluster_id=edge.pk, force=True)

    page = admin_client.get("/clusters/").content.decode()
    edge_cell = page.split('data-cluster-health="edge"')[1].split("</td>")[0]
    prod_cell = page.split('data-cluster-health="prod"')[1].split("</td>")[0]
    assert "unreachable" in edge_cell and "last success 7\xa0minutes ago" in edge_cell
    assert "unreachable" not in prod_cell and "reachable" in prod_cell

    detail = admin_client.get("/clusters/edge/").content.decode()
    panel = detail.split('data-cluster-health="edge"')[1].split("</section>")[0]
    assert "unreachable" in panel and "last success 7\xa0minutes ago" in panel
    assert "could not connect" in panel  # the last error


def test_the_beat_sync_sends_one_task_per_kubernetes_cluster(clusters):
    from worker.tasks.clusters import SYNC_PERIOD_S, cluster_sync_task

    prod, edge = clusters
    Cluster.objects.create(name="Sim", slug="sim")  # simulated: nothing to sync
    with mock.patch.object(cluster_sync_task, "apply_async") as send:
        assert cluster_sync_task() == {"sent": [prod.pk, edge.pk]}
    assert [c.kwargs for c in send.call_args_list] == [
        {"args": [prod.pk], "expires": SYNC_PERIOD_S},
        {"args": [edge.pk], "expires": SYNC_PERIOD_S},
    ]
    (report,) = cluster_sync_task(edge.pk)  # the per-cluster task itself: only that cluster
    assert report["cluster"] == "edge"


def test_a_pass_deadline_bounds_calls_that_each_have_a_longer_timeout(tmp_path):
    from apps.clusters.backends.errors import TransientBackendError
    from apps.clusters.backends.kubernetes import KubernetesBackend

    silent = SilentServer()
    try:
        backend = KubernetesBackend(str(kubeconfig_for(silent, tmp_path)), timeout=120)
        backend.set_deadline(0.5)
        with pytest.raises(TransientBackendError, match="timed out"):
            backend.list_owned("Pod")  # waits the 0.5 s left, not the 120 s timeout
        with pytest.raises(TransientBackendError, match="deadline exceeded"):
            backend.list_owned("Node", selector="")
        assert len(silent.connections) == 1  # the second call was never sent
        backend.close()
    finally:
        silent.stop()


def test_the_fleet_page_names_the_unreachable_cluster_for_staff(clusters, pushed, admin_client, tmp_path):
    prod, edge = clusters
    reconcile_cluster_run(cluster_id=prod.pk)
    assert "data-unreachable-clusters" not in admin_client.get("/inventory/").content.decode()
    point_at(edge, _Refusing(), tmp_path)
    reconcile_cluster_run(cluster_id=edge.pk)
    page = admin_client.get("/inventory/").content.decode()
    notice = page.split("data-unreachable-clusters")[1].split("</section>")[0]
    assert "1 cluster is unreachable" in notice and "/clusters/edge/" in notice
    assert "never reached" in notice and "/clusters/prod/" not in notice
