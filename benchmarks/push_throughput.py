"""Push throughput: outbox actions applied per second against the fake Kubernetes API server.

A cluster on the fake API server (tests/kube/fake_apiserver/, HTTP on 127.0.0.1) reached through
the official ``kubernetes`` client; 100 nodes × 8 A100 cards; JOBS whole-card jobs scheduled in one
cycle, which writes two actions each (the project namespace, then the batch/v1 Job). The same
actions are pushed three ways, the API server emptied and the actions reset in between:

- baseline: a naive pusher — a new client (and connection) for every action, one action at a time;
- per stream: ``push_stream_run`` per job, as the after-commit task does (one client per job);
- batch: ``push_pending_run`` (the periodic catch-up), one client per cluster for the whole batch.

Then the batch mode once more with 5 % of create calls answering 500, to show the retries and that
no object is duplicated or lost. Last, device-plugin mode ``dra`` against ``plain`` in the same run
(issue 18): the same placed jobs rendered in memory (``workload_objects``: a ResourceClaim selecting
each card by UUID with CEL, vs a ``nvidia.com/gpu`` count; goal ≥ 200 jobs/s rendered), then
rendered into the outbox (``push_actions_enqueue_many``) and pushed in one batch — jobs/s and the
DRA / plain ratio. Prints actions/s and ratios; asserts nothing on time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_push python benchmarks/push_throughput.py
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from datetime import date
from decimal import Decimal
from pathlib import Path

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_push")

import django  # noqa: E402

NODES = int(os.environ.get("BENCH_NODES", 100))
JOBS = int(os.environ.get("BENCH_JOBS", 400))


def build(kubeconfig: Path):
    from apps.accounts.models import Department, Project
    from apps.catalog.models import ComputeCoefficient, DeviceModel
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.jobs.models import Job

    a100 = DeviceModel.objects.create(
        vendor="nvidia", kind="gpu", name="A100 80GB SXM4", slug="a100", memory_mib=81920
    )
    ComputeCoefficient.objects.create(
        device_model=a100, value=Decimal("1.0"), effective_from=date(2024, 1, 1)
    )
    cluster = Cluster.objects.create(
        name="bench", slug="bench", backend=Cluster.Backend.KUBERNETES, kubeconfig_path=str(kubeconfig)
    )
    pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, pool=pool, name=f"gpu-{i:03d}", driver_version="550.54.15")
        for i in range(NODES)
    )
    Device.objects.bulk_create(
        Device(node=n, vendor="nvidia", index=i, uuid=f"GPU-{n.name}-{i}", device_model=a100)
        for n in nodes
        for i in range(8)
    )
    dept = Department.objects.create(name="d", slug="d")
    project = Project.objects.create(department=dept, name="bench", slug="bench", namespace="bench")
    Job.objects.bulk_create(
        Job(
            project=project,
            name=f"j{i}",
            image="pytorch:2.3",
            request_kind=Job.RequestKind.WHOLE_CARDS,
            device_model=a100,
            count=1,
        )
        for i in range(JOBS)
    )
    return cluster


def reset(server) -> None:
    """Empty the API server and make every action pending again."""
    from apps.clusters.models import PushAction

    with server._lock:
        server._store.clear()
    PushAction.objects.update(
        state=PushAction.State.PENDING,
        attempts=0,
        last_error="",
        applied_at=None,
        next_attempt_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
    )


def naive(cluster) -> int:
    from django.utils import timezone

    from apps.clusters.backends.kubernetes import KubernetesBackend
    from apps.clusters.models import PushAction

    n = 0
    for action in PushAction.objects.filter(state=PushAction.State.PENDING).order_by(
        "stream", "attempt", "seq"
    ):
        backend = KubernetesBackend(cluster)
        try:
            backend.apply(action.object)
        finally:
            backend.close()
        PushAction.objects.filter(pk=action.pk).update(
            state=PushAction.State.APPLIED, applied_at=timezone.now()
        )
        n += 1
    return n


def per_stream() -> int:
    from apps.clusters.pusher import push_due_streams
    from apps.scheduling.push import push_stream_run

    return sum(push_stream_run(stream=s)["applied"] for s in push_due_streams(limit=10**6))


def batch() -> int:
    from apps.clusters.models import PushAction
    from apps.scheduling.push import push_pending_run

    before = PushAction.objects.filter(state=PushAction.State.APPLIED).count()
    push_pending_run(limit=10**6)
    return PushAction.objects.filter(state=PushAction.State.APPLIED).count() - before


RENDER_ROUNDS = int(os.environ.get("BENCH_RENDER_ROUNDS", 5))


def dra_vs_plain(cluster, server) -> None:
    """Render, and render + push, the same placed jobs in plain and in DRA mode (same run)."""
    from django.db import transaction

    from apps.clusters.manifests import workload_objects
    from apps.clusters.models import PushAction
    from apps.clusters.outbox import push_actions_enqueue_many
    from apps.inventory.models import Cluster
    from apps.jobs.models import Allocation, Job, JobState

    jobs = list(Job.objects.filter(state=JobState.SCHEDULED).select_related("project").order_by("pk"))
    allocations: dict[int, list] = {job.pk: [] for job in jobs}
    for a in Allocation.objects.filter(job__in=jobs, released_at__isnull=True).select_related(
        "device", "node"
    ):
        allocations[a.job_id].append(a)
    figures: dict[str, dict[str, float]] = {}
    for mode, modes in (("plain", {}), ("dra", {"nvidia": "dra"})):
        Cluster.objects.filter(pk=cluster.pk).update(device_plugin_modes=modes)
        cluster.refresh_from_db()
        started = time.perf_counter()
        objects = 0
        for _ in range(RENDER_ROUNDS):
            for job in jobs:
                objects += len(workload_objects(job, allocations[job.pk], cluster, attempt=job.attempt))
        render_s = time.perf_counter() - started
        rendered = len(jobs) * RENDER_ROUNDS / render_s

        PushAction.objects.all().delete()
        with server._lock:
            server._store.clear()
        started = time.perf_counter()
        with transaction.atomic():
            actions = len(push_actions_enqueue_many((job, allocations[job.pk], cluster) for job in jobs))
        PushAction.objects.update(next_attempt_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        applied = batch()
        total_s = time.perf_counter() - started
        claims = len(server.objects("ResourceClaim")) if mode == "dra" else 0
        figures[mode] = {"render": rendered, "push": len(jobs) / total_s}
        print(
            f"{mode:5s}: rendered {rendered:8.1f} jobs/s ({objects // RENDER_ROUNDS} objects per round); "
            f"render + push {len(jobs)} jobs ({actions} actions, {applied} applied, {claims} ResourceClaims) "
            f"in {total_s:6.2f}s = {len(jobs) / total_s:7.1f} jobs/s"
        )
    print(
        f"ratio dra / plain: render {figures['dra']['render'] / figures['plain']['render']:.2f}x, "
        f"render + push {figures['dra']['push'] / figures['plain']['push']:.2f}x "
        f"(goal: >= 200 jobs/s rendered in DRA mode: {figures['dra']['render']:.0f})"
    )


def main() -> None:
    ensure_database()
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from apps.clusters.models import PushAction
    from apps.scheduling.push import push_pending_run
    from apps.scheduling.services import scheduling_cycle_run
    from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduling_pushaction, scheduling_allocation, scheduling_decisiontrace, jobs_jobevent, "
            "jobs_job, inventory_device, inventory_node, inventory_pool, scheduling_simulatedcluster, "
            "inventory_cluster, catalog_computecoefficient, catalog_devicemodel, accounts_project, "
            "accounts_department CASCADE"
        )
    # No controllers: the fake runs its Job / GC / eviction / quota controllers inside every request
    # (a real kube-controller-manager works beside the API server, not in its request path), which
    # would make each apply cost O(objects) and measure the fake instead of Suanchi's push path.
    with FakeApiServer(controllers=False) as server, tempfile.TemporaryDirectory() as tmp:
        cluster = build(kubeconfig_for(server, Path(tmp)))
        result = scheduling_cycle_run()
        actions = PushAction.objects.count()
        print(
            f"{result.placed} jobs scheduled on {NODES} nodes; {actions} push actions (namespace + Job each)"
        )

        figures = {}
        for label, fn in (
            ("baseline (new client per action)", lambda: naive(cluster)),
            ("per stream (push_stream_run)", per_stream),
            ("batch (push_pending_run)", batch),
        ):
            reset(server)
            started = time.perf_counter()
            applied = fn()
            seconds = time.perf_counter() - started
            figures[label] = applied / seconds
            jobs = len(server.objects("Job"))
            print(
                f"{label:36s} {applied:5d} applied in {seconds:6.2f}s = {applied / seconds:8.1f} actions/s  ({jobs} Jobs)"
            )
        base = figures["baseline (new client per action)"]
        for label, value in figures.items():
            print(f"ratio {label} / baseline: {value / base:.2f}x")

        # Faults: 5 % of creates answer 500; retries are due at once for the benchmark's purpose.
        reset(server)
        server.inject(r"/jobs$", status=500, times=max(1, JOBS // 20), method="POST")
        started = time.perf_counter()
        rounds = 0
        while PushAction.objects.filter(state=PushAction.State.PENDING).exists() and rounds < 10:
            push_pending_run(limit=10**6, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=rounds))
            rounds += 1
        seconds = time.perf_counter() - started
        applied = PushAction.objects.filter(state=PushAction.State.APPLIED).count()
        names = [o["metadata"]["name"] for o in server.objects("Job")]
        print(
            f"with 5% injected 500s: {applied} applied in {rounds} rounds, {seconds:.2f}s "
            f"({applied / seconds:.1f} actions/s); Jobs on the server: {len(names)}, "
            f"duplicates: {len(names) - len(set(names))}, failed actions: "
            f"{PushAction.objects.filter(state=PushAction.State.FAILED).count()}"
        )

        dra_vs_plain(cluster, server)


if __name__ == "__main__":
    main()
