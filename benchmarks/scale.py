"""Scale benchmark: engine, full cycle, unschedulable backlog and reconcile, at 1,000 / 5,000 / 10,000 nodes.

In one run, for each fleet size (8 cards per node):

1. engine (pure Python, in memory; the mixed-vendor fleet and queue of ``engine_throughput.py``):
   decisions/s and p99 of the production policy against the naive first fit measured beside it;
2. full cycle with PostgreSQL (the mixed A100 / T4 / Ascend / DCU fleet of ``scheduling_cycle.py``):
   JOBS queued jobs scheduled from scratch, persisted in batches under row locks: jobs/s;
3. a cycle with a 20,000-job backlog that cannot fit (eight Ascend cards each, while every Ascend
   node has a card in use) against the same cycle without it: the same number of new jobs is
   queued each time, the backlog was examined once before (and parked by the queueing hints);
4. once, reconcile of one cluster with 50,000 pods on the fake Kubernetes API server
   (``tests/kube/fake_apiserver/`` over HTTP with the official client, controllers off as in
   ``push_throughput.py``).

After every cycle the stored allocations are checked: over-allocated cards
(``apps.scheduling.invariants.allocation_capacity_violations``) and quota overruns
(``project_cu_overruns``) must both be 0. Figures only; nothing is asserted on time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_scale python benchmarks/scale.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from pathlib import Path

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_scale")

import django  # noqa: E402

BACKLOG_SHAPE = ("whole", "910b3", 8)


def check_invariants(label: str) -> tuple[int, int]:
    from apps.scheduling.invariants import allocation_capacity_violations, project_cu_overruns

    over = allocation_capacity_violations()
    quota = project_cu_overruns()
    cards = len({v.device_id for v in over})
    print(f"    invariants after {label}: over-allocated cards {cards}, quota overruns {len(quota)}")
    return cards, len(quota)


def engine_figures(n_nodes: int, n_requests: int, seed: int = 7) -> dict:
    import engine_throughput as et

    from apps.scheduling.engine import Engine
    from apps.scheduling.engine.policies import BEST

    queue = et.build_queue(n_requests, random.Random(seed))
    base = et.measure("naive first fit", seed, n_nodes, queue, et.naive_first_fit)
    engine = Engine(BEST, seed=seed, workload=queue)
    ours = et.measure(f"engine {BEST}", seed, n_nodes, queue, lambda s, r: engine.place(s, r).placed)
    return {"base": base, "ours": ours}


def _new_jobs(models, templates, projects, n: int, prefix: str, seed: int) -> None:
    import scheduling_cycle as sc

    sc.queue_jobs(models, templates, projects, random.Random(seed), n_jobs=n, prefix=prefix)


def _backlog(models, projects, n: int) -> None:
    from apps.jobs.models import PRIORITY_VALUES, Job

    _kind, key, count = BACKLOG_SHAPE
    Job.objects.bulk_create(
        [
            Job(
                project=projects[i % len(projects)],
                name=f"backlog{i}",
                image="x",
                priority_class="normal",
                priority=PRIORITY_VALUES["normal"],
                state="pending",
                request_kind="whole_cards",
                device_model=models[key],
                count=count,
            )
            for i in range(n)
        ],
        batch_size=2000,
    )


def _block_ascend(models, projects) -> int:
    """One card in use on every Ascend node (a running job holding card 0 of each idle one): no node can
    take eight."""
    from django.utils import timezone

    from apps.inventory.models import Device
    from apps.jobs.models import Allocation, Job

    holder = Job.objects.create(
        project=projects[0],
        name="holder",
        image="x",
        state="running",
        request_kind="whole_cards",
        device_model=models["910b3"],
        count=1,
    )
    now = timezone.now()
    rows = [
        Allocation(
            job=holder,
            project_id=holder.project_id,
            device_id=pk,
            node_id=node_id,
            replica=i,  # one slot per card (the unique slot is job, device, replica, attempt)
            whole_card=True,
            memory_mib=65536,
            compute_milli=1000,
            trace_id=uuid.uuid4(),
            started_at=now,
        )
        for i, (pk, node_id) in enumerate(
            Device.objects.filter(device_model=models["910b3"], index=0)
            # nodes with a live allocation block already (a subquery: ``exclude`` across the relation
            # would also drop the nodes with no allocation at all, whose LEFT JOIN yields NULL)
            .exclude(node_id__in=Allocation.objects.filter(released_at__isnull=True).values("node_id"))
            .values_list("pk", "node_id")
        )
    ]
    Allocation.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def _timed_cycle():
    from apps.scheduling.services import scheduling_cycle_run

    started = time.perf_counter()
    result = scheduling_cycle_run()
    return time.perf_counter() - started, result


def cycle_figures(n_nodes: int, n_jobs: int, n_backlog: int, n_new: int) -> dict:
    import scheduling_cycle as sc

    from apps.scheduling.snapshot import snapshot_cache

    sc.reset_database()
    snapshot_cache().invalidate()
    models, templates, projects = sc.build_fleet(n_nodes)
    _new_jobs(models, templates, projects, n_jobs, "j", 42)
    out = {}
    # 2. the full cycle from scratch (the snapshot is built from the database in it)
    seconds, result = _timed_cycle()
    out["full"] = (seconds, result)
    print(
        f"    full cycle: {result.considered} jobs in {seconds:.2f}s = {result.considered / seconds:.1f} jobs/s "
        f"(placed {result.placed}, pending {result.pending}, engine {result.engine_seconds:.2f}s, "
        f"persist {result.persist_seconds:.2f}s, snapshot rebuilt {result.snapshot_rebuilt})"
    )
    out["full_invariants"] = check_invariants("the full cycle")
    # 3. backlog: every Ascend node gets a card in use, then the same cycle without / with it
    blocked = _block_ascend(models, projects)
    seconds, result = _timed_cycle()  # leftovers of the full cycle (and the refresh after the block)

    def repeated(label: str, prefix: str) -> float:
        """The median of three cycles, each with ``n_new`` freshly queued jobs (same shapes)."""
        runs = []
        for k in range(3):
            _new_jobs(models, templates, projects, n_new, f"{prefix}{k}-", 1)
            seconds, result = _timed_cycle()
            runs.append(seconds)
            print(
                f"    cycle {label}: {result.considered} examined, {seconds:.3f}s (engine "
                f"{result.engine_seconds:.3f}s, persist {result.persist_seconds:.3f}s; placed {result.placed}, "
                f"parked {result.parked})"
            )
        return sorted(runs)[1]

    out["without"] = repeated("without backlog", "a")
    _backlog(models, projects, n_backlog)
    seconds, result = _timed_cycle()
    out["first"] = (seconds, result)
    print(
        f"    first look at the backlog of {n_backlog} (+{blocked} Ascend nodes given a card in use): "
        f"{result.considered} jobs examined in {seconds:.2f}s, pending {result.pending}"
    )
    out["with"] = repeated(f"with {n_backlog} backlog", "b")
    out["backlog_invariants"] = check_invariants("the backlog cycles")
    return out


def reconcile_setup(server, tmp: Path, n_pods: int, n_nodes: int, n_jobs: int) -> tuple:
    """Jobs scheduled and pushed for real onto a Kubernetes cluster served by ``server`` (a fake API
    server, controllers off); the pods their Jobs' controller would create, plus the finished pods of
    earlier jobs up to ``n_pods``, written into the fake's store. Returns (cluster, jobs placed, the
    live jobs' Running pods)."""
    from datetime import date
    from decimal import Decimal

    import scheduling_cycle as sc
    from django.db import connection

    from apps.accounts.models import Department, Project
    from apps.catalog.models import ComputeCoefficient, DeviceModel
    from apps.clusters.manifests import LABEL_ATTEMPT, LABEL_JOB, MANAGED_BY
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.jobs.models import Job
    from apps.scheduling.push import push_pending_run
    from apps.scheduling.services import scheduling_cycle_run
    from tests.kube.fake_apiserver import kubeconfig_for

    sc.reset_database()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE scheduling_pushaction CASCADE")
    a100 = DeviceModel.objects.create(
        vendor="nvidia", kind="gpu", name="A100 80GB SXM4", slug="a100", memory_mib=81920
    )
    ComputeCoefficient.objects.create(
        device_model=a100, value=Decimal("1.0"), effective_from=date(2024, 1, 1)
    )
    cluster = Cluster.objects.create(
        name="k8s",
        slug="k8s",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(kubeconfig_for(server, tmp)),
    )
    pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, pool=pool, name=f"gpu-{i:05d}", driver_version="550.54.15")
        for i in range(n_nodes)
    )
    Device.objects.bulk_create(
        (
            Device(node=n, vendor="nvidia", index=i, uuid=f"GPU-{n.name}-{i}", device_model=a100)
            for n in nodes
            for i in range(8)
        ),
        batch_size=4000,
    )
    for n in nodes:
        server.add_node(n.name)
    dept = Department.objects.create(name="d", slug="d")
    project = Project.objects.create(department=dept, name="r", slug="r", namespace="r")
    Job.objects.bulk_create(
        Job(
            project=project,
            name=f"r{i}",
            image="x",
            request_kind="whole_cards",
            device_model=a100,
            count=1,
        )
        for i in range(n_jobs)
    )
    placed = scheduling_cycle_run().placed
    push_pending_run(limit=10**6)
    # The pods: one Running per placed job on its node, then Succeeded pods of finished jobs.
    now = "2026-01-01T00:00:00Z"
    live = list(Job.objects.filter(state="scheduled").values_list("pk", "attempt", "allocations__node__name"))
    live_pods = []
    with server._lock:
        for i in range(n_pods):
            if i < len(live):
                job_id, attempt, node = live[i]
                phase = "Running"
            else:
                job_id, attempt, node = 10_000_000 + i, 0, nodes[i % len(nodes)].name
                phase = "Succeeded"
            name = f"job-{job_id}-{attempt}-{i}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": "r",
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now,
                    "labels": {
                        "app.kubernetes.io/managed-by": MANAGED_BY,
                        LABEL_JOB: str(job_id),
                        LABEL_ATTEMPT: str(attempt),
                    },
                },
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
                "status": {"phase": phase},
            }
            server._bump(pod)
            server._store[("pods", "r", name)] = pod
            if phase == "Running":
                live_pods.append(pod)
    return cluster, placed, live_pods


def reconcile_figures(n_pods: int, n_nodes: int, n_jobs: int) -> dict:
    """One reconcile pass over the cluster of :func:`reconcile_setup` (it lists every pod)."""
    from apps.scheduling.reconcile import reconcile_cluster
    from tests.kube.fake_apiserver import FakeApiServer

    with FakeApiServer(controllers=False) as server, tempfile.TemporaryDirectory() as tmp:
        cluster, placed, live = reconcile_setup(server, Path(tmp), n_pods, n_nodes, n_jobs)
        started = time.perf_counter()
        report = reconcile_cluster(cluster=cluster, actor="bench")
        seconds = time.perf_counter() - started
        print(
            f"reconcile: {n_pods} pods ({len(live)} of {placed} live jobs) on {n_nodes} nodes: {seconds:.2f}s "
            f"= {n_pods / seconds:.0f} pods/s; checked {report.checked}, errors {report.errors[:2]}"
        )
        return {"seconds": seconds, "pods": n_pods}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes)")
    parser.add_argument("--sizes", default="")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: engine,cycle,reconcile")
    parser.add_argument("--jobs", type=int, default=0, help="jobs in the full cycle")
    parser.add_argument("--backlog", type=int, default=0, help="unschedulable backlog size")
    parser.add_argument("--requests", type=int, default=0, help="engine requests")
    args = parser.parse_args(argv)
    if args.quick:
        sizes, requests, jobs, backlog, new, pods = [200, 500, 1000], 1000, 1000, 2000, 100, 5000
    else:
        sizes, requests, jobs, backlog, new, pods = [1000, 5000, 10000], 2000, 5000, 20000, 200, 50000
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    jobs, backlog, requests = args.jobs or jobs, args.backlog or backlog, args.requests or requests
    skip = set(args.skip.split(","))
    ensure_database()
    django.setup()
    summary = []
    for n in sizes:
        print(f"== {n} nodes / {n * 8} cards")
        row = {"nodes": n}
        if "engine" not in skip:
            e = engine_figures(n, requests)
            b, o = e["base"], e["ours"]
            print(
                f"    engine: {o['decisions_per_s']:.0f} decisions/s (warm {o['warm_per_s']:.0f}/s after a first "
                f"decision of {o['first_ms']:.0f} ms that builds the fleet index), p99 {o['p99_ms']:.2f} ms; naive first fit "
                f"{b['decisions_per_s']:.0f}/s, p99 {b['p99_ms']:.2f} ms ({o['decisions_per_s'] / b['decisions_per_s']:.1f}x); "
                f"violations {o['invariant_violations']}"
            )
            row["engine"] = o["decisions_per_s"]
            row["warm"] = o["warm_per_s"]
        if "cycle" not in skip:
            c = cycle_figures(n, jobs, backlog, new)
            s, r = c["full"]
            row["cycle"] = r.considered / s
            row["ratio"] = c["with"] / c["without"]
            print(f"    backlog cost: {row['ratio']:.2f}x the cycle without it")
        summary.append(row)
    print("== summary")
    for row in summary:
        parts = [f"{row['nodes']:>6} nodes"]
        if "engine" in row:
            parts.append(f"engine {row['engine']:8.0f} decisions/s (warm {row['warm']:8.0f})")
        if "cycle" in row:
            parts.append(f"cycle {row['cycle']:7.1f} jobs/s   backlog {row['ratio']:.2f}x")
        print("  ".join(parts))
    if "engine" in summary[0] and len(summary) > 1:
        print(
            f"engine rate {summary[-1]['nodes']} / {summary[0]['nodes']} nodes: {summary[-1]['engine'] / summary[0]['engine']:.2f}"
            f" (warm, the fleet index built once per snapshot: {summary[-1]['warm'] / summary[0]['warm']:.2f})"
        )
    if "reconcile" not in skip:
        reconcile_figures(pods, 500 if args.quick else 2000, 1000 if args.quick else 4000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
