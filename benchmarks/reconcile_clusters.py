"""Reconcile benchmark: one cluster with 50,000 pods, and N healthy clusters with one hanging one.

1. reconcile of one cluster with 50,000 pods on the fake Kubernetes API server
   (``tests/kube/fake_apiserver/`` over HTTP with the official client, set up as the reconcile
   part of ``scale.py``): the first pass (it lists), then a second pass after 100 pods changed,
   reading the changes with a watch from the first list's resourceVersion, and the same pass with
   a full list (the view dropped first) after 100 other pods changed; the ratio list / watch;
2. one reconcile period over N healthy clusters (each its own fake API server, every node running
   one job), measured until every healthy cluster's pass has finished, in steady state (the jobs
   already running, so every period does the same work):

   - *per cluster* (what the worker does): beat sends one ``reconcile_cluster_task`` per cluster,
     run here by a pool of ``--workers`` threads standing for a worker's concurrency;
   - *one task* (what it did before): one task walking every cluster in turn;

   each without and with one more cluster whose API server accepts connections and never answers
   (the client timeout ``--timeout`` bounds its pass), queued first (the worst case). The ratio
   "with / without" is printed for both designs, and the period after, when the hanging cluster
   backs off and is not sent at all.

3. one quiet cluster (nothing changes between passes) against the fake that, as kube-apiserver's
   watch cache, sends no bookmark after a watch's replay: seconds per pass before (kinds one after
   the other, one 1 s limit for headers and silence) and after (kinds at once, separate limits),
   the goal (<= 1.5 s per pass) and the ratios, then both with every answer 3 s late.

Figures only; nothing is asserted on time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_reconcile \
        python benchmarks/reconcile_clusters.py [--quick] [--pods 50000] [--changed 100] [--clusters 8] [--timeout 5]
"""

from __future__ import annotations

import argparse
import queue
import socket
import tempfile
import threading
import time
from pathlib import Path

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_reconcile")

import django  # noqa: E402


class SilentServer:
    """Accepts TCP connections and never answers (an API server that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

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

    def stop(self) -> None:
        for conn in self.connections:
            conn.close()
        self.sock.close()


def build_clusters(n_clusters: int, nodes_per_cluster: int, tmp: Path):
    """N Kubernetes clusters, each on its own fake API server, every node running one whole-node job."""
    from datetime import date
    from decimal import Decimal

    import scheduling_cycle as sc
    from django.db import connection

    from apps.accounts.models import Department, Project
    from apps.catalog.models import ComputeCoefficient, DeviceModel
    from apps.clusters.models import PushAction
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.jobs.models import Job
    from apps.scheduling.push import push_pending_run
    from apps.scheduling.services import scheduling_cycle_run
    from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for

    sc.reset_database()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE scheduling_pushaction CASCADE")
    a100 = DeviceModel.objects.create(
        vendor="nvidia", kind="gpu", name="A100 80GB SXM4", slug="a100", memory_mib=81920
    )
    ComputeCoefficient.objects.create(
        device_model=a100, value=Decimal("1.0"), effective_from=date(2024, 1, 1)
    )
    servers, clusters = [], []
    for c in range(n_clusters):
        server = FakeApiServer().start()
        directory = tmp / f"c{c}"
        directory.mkdir()
        cluster = Cluster.objects.create(
            name=f"k8s-{c}",
            slug=f"k8s-{c}",
            backend=Cluster.Backend.KUBERNETES,
            kubeconfig_path=str(kubeconfig_for(server, directory)),
        )
        pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
        nodes = Node.objects.bulk_create(
            Node(cluster=cluster, pool=pool, name=f"c{c}-gpu-{i:04d}", driver_version="550.54.15")
            for i in range(nodes_per_cluster)
        )
        Device.objects.bulk_create(
            Device(node=n, vendor="nvidia", index=i, uuid=f"GPU-{n.name}-{i}", device_model=a100)
            for n in nodes
            for i in range(8)
        )
        for n in nodes:
            server.add_node(n.name)
        servers.append(server)
        clusters.append(cluster)
    dept = Department.objects.create(name="d", slug="d")
    project = Project.objects.create(department=dept, name="r", slug="r", namespace="r")
    Job.objects.bulk_create(
        Job(project=project, name=f"r{i}", image="x", request_kind="whole_cards", device_model=a100, count=8)
        for i in range(n_clusters * nodes_per_cluster)
    )
    placed = scheduling_cycle_run().placed
    push_pending_run(limit=10**6)
    workloads = {(a.cluster_id, a.namespace, a.name) for a in PushAction.objects.filter(kind="Job")}
    for server, cluster in zip(servers, clusters, strict=True):
        names = {name for cid, _ns, name in workloads if cid == cluster.pk}
        for pod in server.objects("Pod", "r"):
            if pod["metadata"]["labels"].get("job-name") in names:
                server.set_pod_phase("r", pod["metadata"]["name"], "Running")
    return servers, clusters, placed


def period(cluster_ids: list[int], *, workers: int, per_cluster: bool, timeout: float) -> dict:
    """One reconcile period: seconds until every cluster's pass ended, and until the healthy ones did."""
    from django.db import connection

    from apps.scheduling.reconcile import reconcile_cluster_run

    finished: dict[int, float] = {}
    errors: dict[int, str] = {}
    started = time.perf_counter()

    def one(cluster_id: int) -> None:
        result = reconcile_cluster_run(cluster_id=cluster_id, actor="bench", timeout=timeout, force=True)
        finished[cluster_id] = time.perf_counter() - started
        if result.get("list_error"):
            errors[cluster_id] = result["list_error"]

    if per_cluster:
        tasks: queue.Queue = queue.Queue()
        for cluster_id in cluster_ids:
            tasks.put(cluster_id)

        def worker() -> None:
            try:
                while True:
                    try:
                        cluster_id = tasks.get_nowait()
                    except queue.Empty:
                        return
                    one(cluster_id)
            finally:
                connection.close()

        threads = [threading.Thread(target=worker) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for cluster_id in cluster_ids:  # one task over every cluster, in turn
            one(cluster_id)
    healthy = [s for cid, s in finished.items() if cid not in errors]
    return {"all": max(finished.values()), "healthy": max(healthy), "failed": len(errors)}


def clusters_figures(n_clusters: int, nodes_per_cluster: int, workers: int, timeout: float) -> dict:
    from apps.clusters.health import clusters_in_backoff
    from apps.clusters.models import ClusterLoop
    from apps.inventory.models import Cluster
    from apps.jobs.models import Job
    from apps.scheduling.reconcile import reconcile_due_clusters
    from tests.kube.fake_apiserver import kubeconfig_for

    with tempfile.TemporaryDirectory() as tmp:
        # One cluster more, built healthy (its jobs pushed), then its API server "hangs".
        servers, clusters, placed = build_clusters(n_clusters + 1, nodes_per_cluster, Path(tmp))
        silent = SilentServer()
        try:
            directory = Path(tmp) / "hanging"
            directory.mkdir()
            hanging, clusters = clusters[-1], clusters[:-1]
            Cluster.objects.filter(pk=hanging.pk).update(
                kubeconfig_path=str(kubeconfig_for(silent, directory))
            )
            healthy_ids = [c.pk for c in clusters]
            warm = period(healthy_ids, workers=workers, per_cluster=True, timeout=timeout)  # jobs → running
            running = Job.objects.filter(state="running").count()
            print(
                f"clusters: {n_clusters} healthy x {nodes_per_cluster} nodes ({placed} jobs placed, {running} "
                f"running after the first period, {warm['healthy']:.2f}s); one more cluster that never "
                f"answers (client timeout {timeout:.1f}s); {workers} worker threads"
            )
            figures = {}
            for per_cluster, label in ((True, "per cluster"), (False, "one task")):
                without = period(healthy_ids, workers=workers, per_cluster=per_cluster, timeout=timeout)
                with_ = period(
                    [hanging.pk, *healthy_ids], workers=workers, per_cluster=per_cluster, timeout=timeout
                )
                ratio = with_["healthy"] / without["healthy"]
                figures[label] = ratio
                print(
                    f"    {label:>11}: healthy clusters done in {without['healthy']:.2f}s without the hanging "
                    f"one, {with_['healthy']:.2f}s with it (all done {with_['all']:.2f}s): ratio {ratio:.2f}x"
                )
            due, waiting = reconcile_due_clusters()
            backing_off = clusters_in_backoff(loop=ClusterLoop.Loop.RECONCILE)
            after = period(due, workers=workers, per_cluster=True, timeout=timeout)
            print(
                f"    the period after: the hanging cluster backs off (waiting {waiting == [hanging.pk]}, "
                f"{len(backing_off)} in backoff), {len(due)} clusters sent, done in {after['all']:.2f}s"
            )
            return figures
        finally:
            silent.stop()
            for server in servers:
                server.stop()


def watch_figures(n_pods: int, n_nodes: int, n_jobs: int, changed: int, timeout: float) -> dict:
    """The first reconcile pass over ``n_pods`` pods (it lists), then a second pass after ``changed``
    pods changed, read with a watch, and one after ``changed`` other pods changed, read with a full
    list; both second passes finish ``changed`` jobs (the same database work)."""
    import scale

    from apps.clusters.backends.kubernetes import KubernetesBackend
    from apps.clusters.backends.watch import WatchedView
    from apps.scheduling.reconcile import reconcile_cluster
    from tests.kube.fake_apiserver import FakeApiServer

    WatchedView.forget()
    with FakeApiServer(controllers=False) as server, tempfile.TemporaryDirectory() as tmp:
        cluster, placed, live_pods = scale.reconcile_setup(server, Path(tmp), n_pods, n_nodes, n_jobs)

        def finish(pods: list[dict]) -> None:
            with server._lock:
                for pod in pods:
                    pod["status"] = {"phase": "Succeeded"}
                    server._bump(pod)

        read_seconds = [0.0]
        original = KubernetesBackend.list_watched_kinds  # the pass's reads (every kind at once)

        def timed(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                read_seconds[0] += time.perf_counter() - started

        def one_pass(label: str) -> dict:
            mark = len(server.request_log)
            read_seconds[0] = 0.0
            started = time.perf_counter()
            KubernetesBackend.list_watched_kinds = timed
            try:
                report = reconcile_cluster(cluster=cluster, actor="bench", timeout=timeout)
            finally:
                KubernetesBackend.list_watched_kinds = original
            seconds = time.perf_counter() - started
            reads = [r for r in server.request_log[mark:] if r["method"] == "GET"]
            watches = sum(1 for r in reads if "watch" in r["query"])
            objects = sum(r["objects"] for r in reads)
            print(
                f"    {label:>28}: {seconds:6.2f}s (reading the cluster {read_seconds[0]:.2f}s), {len(reads)} "
                f"reads ({watches} watches), {objects} objects read; checked {report.checked}, succeeded "
                f"{report.succeeded}, errors {report.errors[:2]}"
            )
            return {"seconds": seconds, "read": read_seconds[0], "objects": objects}

        print(
            f"reconcile, one cluster: {n_pods} pods ({len(live_pods)} of {placed} live jobs) on {n_nodes} nodes"
        )
        first = one_pass("first pass (list)")
        one_pass("nothing changed, watch")
        finish(live_pods[:changed])
        watched = one_pass(f"after {changed} changed, watch")
        finish(live_pods[changed : 2 * changed])
        WatchedView.forget()
        listed = one_pass(f"after {changed} changed, list")
        ratio = listed["seconds"] / watched["seconds"]
        print(
            f"    second pass, full list / watch: {ratio:.2f}x the pass, "
            f"{listed['read'] / max(1e-9, watched['read']):.0f}x the reading of the cluster "
            f"({listed['read']:.2f}s / {watched['read']:.3f}s), "
            f"{listed['objects'] / max(1, watched['objects']):.0f}x the objects read (first pass {first['seconds']:.2f}s)"
        )
        return {"first": first, "watch": watched, "list": listed, "ratio": ratio}


def quiet_figures(nodes: int, passes: int, timeout: float) -> dict:
    """Seconds per reconcile pass over one quiet cluster (nothing changes between passes: every pass
    only catches up, with a watch per kind) against the fake as kube-apiserver's watch cache behaves
    (no bookmark after the replay: tests/kube/fake_apiserver/store.py ``next_bookmark_time``), for

    - *before*: the kinds one after the other, one 1 s limit for the headers and for silence, 5 s
      watches (what the backend did before issue 28 §6);
    - *serial*: the kinds one after the other with today's limits (what concurrency alone buys);
    - *after*: today's backend (the kinds at once; headers up to ``WATCH_HEADERS_S``, silence
      ``WATCH_IDLE_S``);

    then both designs with every list and watch answered 3 s late (``header_delay_s``)."""
    from unittest import mock

    from apps.clusters.backends import watch as watch_module
    from apps.clusters.backends.base import ClusterBackend
    from apps.clusters.backends.kubernetes import KubernetesBackend
    from apps.clusters.backends.watch import WatchedView
    from apps.jobs.models import Job
    from apps.scheduling.reconcile import reconcile_cluster

    serial = mock.patch.object(KubernetesBackend, "list_watched_kinds", ClusterBackend.list_watched_kinds)
    old_limits = [
        mock.patch.object(watch_module, "WATCH_IDLE_S", 1.0),
        mock.patch.object(watch_module, "WATCH_HEADERS_S", 1.0),
        mock.patch.object(watch_module, "WATCH_TIMEOUT_S", 5),
    ]
    WatchedView.forget()
    with tempfile.TemporaryDirectory() as tmp:
        servers, clusters, placed = build_clusters(1, nodes, Path(tmp))
        (server,), (cluster,) = servers, clusters
        try:
            reconcile_cluster(cluster=cluster, actor="bench", timeout=timeout)  # lists; jobs → running
            reconcile_cluster(cluster=cluster, actor="bench", timeout=timeout)
            running = Job.objects.filter(state="running").count()

            def measure(label: str, patches: list) -> dict:
                for p in patches:
                    p.start()
                try:
                    seconds, errors = [], []
                    for _ in range(passes):
                        started = time.perf_counter()
                        report = reconcile_cluster(cluster=cluster, actor="bench", timeout=timeout)
                        seconds.append(time.perf_counter() - started)
                        errors.extend(report.errors)
                        if report.list_error:  # the views are dropped: the next pass would list
                            WatchedView.forget()
                            reconcile_cluster(cluster=cluster, actor="bench", timeout=timeout)
                finally:
                    for p in reversed(patches):
                        p.stop()
                mean = sum(seconds) / len(seconds)
                print(
                    f"    {label:>44}: {mean:5.2f}s per pass (min {min(seconds):.2f}s, max {max(seconds):.2f}s, "
                    f"{passes} passes), {len(errors)} errors {errors[:1]}"
                )
                return {"seconds": mean, "errors": len(errors)}

            print(
                f"quiet cluster: 1 cluster x {nodes} nodes, {running} of {placed} jobs running, nothing "
                f"changes between passes; the fake sends no early bookmark. Goal: <= 1.5 s per pass"
            )
            before = measure("before (serial kinds, 1 s headers = idle)", [serial, *old_limits])
            serial_now = measure("serial kinds, today's limits", [serial])
            after = measure("after (kinds at once, today's limits)", [])
            goal = "met" if after["seconds"] <= 1.5 else "NOT met"
            print(
                f"    after: {after['seconds']:.2f}s per pass, goal <= 1.5 s {goal}; before / after "
                f"{before['seconds'] / after['seconds']:.2f}x, serial / concurrent (same limits) "
                f"{serial_now['seconds'] / after['seconds']:.2f}x"
            )
            server.header_delay_s = 3.0
            print(
                "  every list and watch answered 3 s late (API Priority and Fairness queueing, a lagging watch cache):"
            )
            late_before = measure("before (serial kinds, 1 s headers = idle)", [serial, *old_limits])
            late_after = measure("after (kinds at once, today's limits)", [])
            server.header_delay_s = 0.0
            return {
                "before": before,
                "serial": serial_now,
                "after": after,
                "late_before": late_before,
                "late_after": late_after,
            }
        finally:
            for s in servers:
                s.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument(
        "--pods", type=int, default=None, help="pods in the one-cluster reconcile (0: skip it)"
    )
    parser.add_argument("--changed", type=int, default=100, help="pods changed before the second pass")
    parser.add_argument("--clusters", type=int, default=0, help="healthy clusters (-1: skip that part)")
    parser.add_argument("--nodes", type=int, default=0, help="nodes (= running jobs) per healthy cluster")
    parser.add_argument("--workers", type=int, default=4, help="worker threads (a worker's concurrency)")
    parser.add_argument(
        "--quiet-passes", type=int, default=3, help="passes per figure of the quiet-cluster part (0: skip it)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="Kubernetes client timeout, seconds")
    parser.add_argument(
        "--pods-timeout", type=float, default=120.0, help="client timeout of the 50,000-pod part, seconds"
    )
    args = parser.parse_args(argv)
    pods = args.pods if args.pods is not None else (5000 if args.quick else 50000)
    n_clusters = max(0, args.clusters or (4 if args.quick else 8))
    nodes = args.nodes or (10 if args.quick else 25)
    ensure_database()
    django.setup()
    if pods:
        # The fake API server runs in this process and answers a 500-pod page in seconds on a busy
        # machine: the part gets a client timeout of its own (the figure is the pass, not a timeout).
        watch_figures(
            pods, 500 if args.quick else 2000, 1000 if args.quick else 4000, args.changed, args.pods_timeout
        )
    if n_clusters:
        clusters_figures(n_clusters, nodes, args.workers, args.timeout)
    if args.quiet_passes > 0:
        quiet_figures(nodes, args.quiet_passes, args.timeout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
