"""Full scheduling cycle with PostgreSQL persistence: jobs per second.

Synthetic fleet: 1,000 nodes / 8,000 cards (NVIDIA A100 80GB SXM4 NVLink boards, T4, Ascend 910B3,
Hygon DCU), 5,000 queued jobs of mixed shapes (whole cards ×1/2/4/8, hard and shared slices,
compute units on Ascend). The same queue is scheduled twice from scratch:

- baseline: one transaction per job (batch size 1), as a naive service would persist;
- suanchi: the production path (batches of 200 under one set of row locks).

Prints jobs/s for both, the ratio, the engine's share of the time, and checks afterwards that no
card is over-allocated and no project is over its quota. Figures only; nothing is asserted on time.
``BENCH_BASELINE=0`` skips the baseline (slow at 10,000 nodes); ``BENCH_PROFILE=<path>`` profiles the
production run with cProfile and prints the top 20 by cumulative time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench python benchmarks/scheduling_cycle.py
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from datetime import date
from decimal import Decimal

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench")

import django  # noqa: E402

NODES = int(os.environ.get("BENCH_NODES", 1000))
JOBS = int(os.environ.get("BENCH_JOBS", 5000))


def build_fleet(n_nodes: int | None = None):
    n_nodes = NODES if n_nodes is None else n_nodes
    from apps.accounts.models import Department, Project
    from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel
    from apps.inventory.models import Cluster, Device, Node, Pool

    models = {
        "a100": DeviceModel.objects.create(
            vendor="nvidia",
            kind="gpu",
            name="A100 80GB SXM4",
            slug="a100",
            memory_mib=81920,
            features=["nvlink"],
        ),
        "t4": DeviceModel.objects.create(vendor="nvidia", kind="gpu", name="T4", slug="t4", memory_mib=15360),
        "910b3": DeviceModel.objects.create(
            vendor="huawei", kind="npu", name="Ascend 910B3", slug="910b3", memory_mib=65536
        ),
        "dcu": DeviceModel.objects.create(
            vendor="hygon", kind="dcu", name="DCU Z100/Z100L", slug="dcu", memory_mib=32768
        ),
    }
    for key, coef in (("a100", "1.0"), ("t4", "0.2083"), ("910b3", "0.8"), ("dcu", "0.3")):
        ComputeCoefficient.objects.create(
            device_model=models[key], value=Decimal(coef), effective_from=date(2024, 1, 1)
        )
    templates = {
        "a100-half": ComputeTemplate.objects.create(
            device_model=models["a100"],
            name="half",
            slug="a100-half",
            memory_mib=40960,
            compute_share=50,
            isolation="shared",
            max_instances=2,
        ),
        "a100-3g": ComputeTemplate.objects.create(
            device_model=models["a100"],
            name="3g.40gb",
            slug="a100-3g",
            memory_mib=40960,
            compute_share=Decimal("42.86"),
            isolation="hard",
            partition_profile="",
            max_instances=2,
        ),
        "t4-quarter": ComputeTemplate.objects.create(
            device_model=models["t4"],
            name="quarter",
            slug="t4-q",
            memory_mib=3072,
            compute_share=25,
            isolation="shared",
            max_instances=4,
        ),
    }
    cluster = Cluster.objects.create(name="bench", slug="bench")
    pool = Pool.objects.create(cluster=cluster, name="all", slug="all")
    mix = ["a100"] * 5 + ["t4"] * 2 + ["910b3"] * 2 + ["dcu"]
    nodes = Node.objects.bulk_create(
        [
            Node(cluster=cluster, pool=pool, name=f"n{i:05d}", driver_version="550.54.15")
            for i in range(n_nodes)
        ]
    )
    devices = []
    for i, node in enumerate(nodes):
        key = mix[i % len(mix)]
        model = models[key]
        for d in range(8):
            devices.append(
                Device(
                    node=node,
                    vendor=model.vendor,
                    index=d,
                    uuid=f"{node.name}-{d}",
                    device_model=model,
                    topology_group=f"g{d // 4}" if key == "a100" else "",
                )
            )
    Device.objects.bulk_create(devices, batch_size=2000)
    dept = Department.objects.create(name="bench", slug="bench")
    projects = [
        Project.objects.create(department=dept, name=f"p{i}", slug=f"p{i}", namespace=f"p{i}")
        for i in range(10)
    ]
    return models, templates, projects


def queue_jobs(
    models, templates, projects, rng: random.Random, n_jobs: int | None = None, prefix: str = "j"
) -> None:
    from apps.jobs.models import PRIORITY_VALUES, Job

    n_jobs = JOBS if n_jobs is None else n_jobs
    shapes = [
        ("whole", "a100", 1),
        ("whole", "a100", 2),
        ("whole", "a100", 4),
        ("whole", "a100", 8),
        ("whole", "910b3", 1),
        ("whole", "910b3", 4),
        ("whole", "dcu", 1),
        ("whole", "t4", 1),
        ("template", "a100-half", 1),
        ("template", "a100-3g", 1),
        ("template", "t4-quarter", 1),
        ("cu", "huawei", Decimal("0.4")),
    ]
    jobs = []
    for i in range(n_jobs):
        kind, what, n = shapes[rng.randrange(len(shapes))]
        prio = rng.choice(["low", "normal", "normal", "high"])
        common = dict(
            project=projects[i % len(projects)],
            name=f"{prefix}{i}",
            image="x",
            priority_class=prio,
            priority=PRIORITY_VALUES[prio],
            state="pending",
        )
        if kind == "whole":
            jobs.append(Job(request_kind="whole_cards", device_model=models[what], count=n, **common))
        elif kind == "template":
            jobs.append(Job(request_kind="template", template=templates[what], count=n, **common))
        else:
            jobs.append(Job(request_kind="compute_units", compute_units=n, allowed_vendors=[what], **common))
    Job.objects.bulk_create(jobs, batch_size=1000)


def check_no_overallocation() -> int:
    from apps.jobs.models import Allocation

    usage = defaultdict(lambda: [0, 0, 0])
    caps = {}
    for a in Allocation.objects.filter(released_at__isnull=True).select_related("device__device_model"):
        u = usage[a.device_id]
        u[0] += a.memory_mib
        u[1] += a.compute_milli
        u[2] += 1 if a.whole_card else 0
        caps[a.device_id] = a.device.device_model.memory_mib
    bad = sum(1 for pk, u in usage.items() if u[0] > caps[pk] or u[1] > 1000 or (u[2] and u[1] > 1000))
    return bad


def check_no_quota_overrun() -> int:
    """Projects whose allocations ever exceeded their quota (``apps.scheduling.invariants``)."""
    from apps.scheduling.invariants import project_cu_overruns

    return len(project_cu_overruns())


def reset_schedule() -> None:
    from apps.clusters.models import PushAction
    from apps.jobs.models import Allocation, Job, JobEvent
    from apps.scheduling.models import DecisionTrace

    PushAction.objects.all().delete()
    Allocation.objects.all().delete()
    DecisionTrace.objects.all().delete()
    JobEvent.objects.all().delete()
    Job.objects.update(state="pending", state_reason="", last_trace_id=None)


def run(batch: int) -> tuple[float, object]:
    from apps.scheduling.services import scheduling_cycle_run

    reset_schedule()
    started = time.perf_counter()
    result = scheduling_cycle_run(batch=batch, policy=os.environ.get("BENCH_POLICY") or None)
    return time.perf_counter() - started, result


def reset_database() -> None:
    """Migrate, then empty every table the benchmark fills."""
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduling_allocation, scheduling_decisiontrace, jobs_jobevent, jobs_job, inventory_device, "
            "inventory_node, inventory_pool, inventory_cluster, catalog_computetemplate, catalog_computecoefficient, "
            "catalog_devicemodel, accounts_project, accounts_department CASCADE"
        )


def vacuum_analyze() -> None:
    """``VACUUM (ANALYZE)`` the freshly built fleet and queue: where autovacuum is off, the planner
    would otherwise plan the cycle's queries on the statistics of the tables as they were before."""
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection
    autocommit = raw.autocommit
    raw.autocommit = True  # VACUUM cannot run inside a transaction block
    try:
        raw.execute("VACUUM (ANALYZE)")
    finally:
        raw.autocommit = autocommit


def main() -> None:
    ensure_database()
    django.setup()
    reset_database()
    rng = random.Random(42)
    models, templates, projects = build_fleet()
    queue_jobs(models, templates, projects, rng)
    vacuum_analyze()
    print(f"fleet: {NODES} nodes / {NODES * 8} cards; queue: {JOBS} jobs (PostgreSQL)")

    rows = []
    if os.environ.get("BENCH_BASELINE", "1") != "0":  # BENCH_BASELINE=0: only the production path
        base_s, base = run(batch=1)
        rows.append(("baseline (1 job / transaction)", base_s, base))
    profile_to = os.environ.get("BENCH_PROFILE")  # a path: cProfile the production run, top 20 cumulative
    if profile_to:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        ours_s, ours = profiler.runcall(run, 200)
        profiler.dump_stats(profile_to)
        pstats.Stats(profile_to).sort_stats("cumulative").print_stats(20)
    else:
        ours_s, ours = run(batch=200)
    rows.append(("suanchi (200 / batch)", ours_s, ours))
    bad = check_no_overallocation()
    for label, seconds, result in rows:
        print(
            f"{label:32s} {result.considered / seconds:8.1f} jobs/s   placed {result.placed:5d}  pending "
            f"{result.pending:5d}  conflicts {result.conflicts}   engine {result.engine_seconds:6.2f}s  "
            f"persist {result.persist_seconds:6.2f}s  total {seconds:6.2f}s"
        )
    print(f"engine decisions/s (in the cycle): {ours.considered / ours.engine_seconds:8.1f}")
    if len(rows) == 2:
        print(f"ratio suanchi / baseline: {(ours.considered / ours_s) / (base.considered / base_s):.2f}x")
    print(f"over-allocated cards after the run: {bad}")
    print(f"quota overruns after the run: {check_no_quota_overrun()}")


if __name__ == "__main__":
    main()
