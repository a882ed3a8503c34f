"""List pages and list endpoints at scale: p95 per page with 10,000 nodes, 80,000 cards, 200,000 jobs.

The dataset is written with bulk_create into a PostgreSQL database of its own (two device models,
10 projects with quotas, jobs in every state, an active allocation per running job). Each page is
requested REPEAT times through Django's test client as a platform administrator (the whole stack:
middleware, view, template or serializer); prints p50 / p95 in ms and the number of SQL queries.
The goal (issue 20) is p95 under 300 ms. Figures only.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_pages python benchmarks/pages_at_scale.py [--quick]
"""

from __future__ import annotations

import argparse
import time
import uuid
from decimal import Decimal

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_pages")

import django  # noqa: E402

PAGES = [
    ("jobs page", "/jobs/"),
    ("nodes page", "/inventory/nodes/"),
    ("devices page", "/inventory/devices/"),
    ("fleet overview", "/inventory/"),
    ("quotas overview", "/quotas/"),
    ("allocations (admin list)", "/admin/jobs/allocation/"),
    ("jobs API", "/api/jobs/jobs/"),
    ("nodes API", "/api/inventory/nodes/"),
    ("devices API", "/api/inventory/devices/"),
    ("quota usage API", "/api/quotas/quotas/usage/"),
]


def build(n_nodes: int, n_jobs: int) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from apps.accounts.models import Department, Project
    from apps.catalog.models import DeviceModel
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.jobs.models import Allocation, Job
    from apps.quotas.models import Quota

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduling_allocation, scheduling_decisiontrace, jobs_jobevent, jobs_job, inventory_device, "
            "inventory_node, inventory_pool, inventory_cluster, catalog_devicemodel, quotas_quota, "
            "accounts_project, accounts_department CASCADE"
        )
    get_user_model().objects.filter(username="bench-admin").delete()
    get_user_model().objects.create_user(
        "bench-admin", is_staff=True, is_superuser=True
    )  # no password: force_login
    models = [
        DeviceModel.objects.create(
            vendor="nvidia", kind="gpu", name="A100 80GB SXM4", slug="a100", memory_mib=81920
        ),
        DeviceModel.objects.create(
            vendor="huawei", kind="npu", name="Ascend 910B3", slug="910b3", memory_mib=65536
        ),
    ]
    cluster = Cluster.objects.create(name="c", slug="c")
    pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
    dept = Department.objects.create(name="d", slug="d")
    projects = [
        Project.objects.create(department=dept, name=f"p{i}", slug=f"p{i}", namespace=f"p{i}")
        for i in range(10)
    ]
    for project in projects:
        Quota.objects.create(project=project, guaranteed_cu=Decimal("800"), borrowing_limit_cu=Decimal("400"))
    nodes = Node.objects.bulk_create(
        (
            Node(
                cluster=cluster,
                pool=pool,
                name=f"n{i:05d}",
                driver_version="550.54.15",
                switch=f"leaf-{i // 32}",
            )
            for i in range(n_nodes)
        ),
        batch_size=2000,
    )
    devices = Device.objects.bulk_create(
        (
            Device(
                node=node,
                vendor=models[i % 2].vendor,
                device_model=models[i % 2],
                index=d,
                uuid=f"{node.name}-{d}",
                topology_group=f"g{d // 4}",
            )
            for i, node in enumerate(nodes)
            for d in range(8)
        ),
        batch_size=4000,
    )
    states = ["succeeded"] * 6 + ["failed", "cancelled", "pending", "running"]
    jobs = Job.objects.bulk_create(
        (
            Job(
                project=projects[i % len(projects)],
                name=f"j{i}",
                image="x",
                request_kind="whole_cards",
                device_model=models[0],
                count=1,
                state=states[i % len(states)],
            )
            for i in range(n_jobs)
        ),
        batch_size=5000,
    )
    now = timezone.now()
    running = [j for j in jobs if j.state == "running"]
    cards = [d for d in devices if d.device_model_id == models[0].pk]
    Allocation.objects.bulk_create(
        (
            Allocation(
                job=job,
                device=device,
                node_id=device.node_id,
                whole_card=True,
                memory_mib=81920,
                compute_milli=1000,
                compute_units=Decimal("1"),
                trace_id=uuid.uuid4(),
                started_at=now,
            )
            for job, device in zip(running, cards, strict=False)
        ),
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 nodes / 20,000 jobs")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-build", action="store_true", help="reuse the dataset of the last run")
    args = parser.parse_args(argv)
    n_nodes, n_jobs = (1000, 20000) if args.quick else (10000, 200000)
    ensure_database()
    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    setup_test_environment()  # the test client's host ("testserver") is allowed, as under pytest
    if not args.no_build:
        started = time.perf_counter()
        build(n_nodes, n_jobs)
        print(
            f"dataset: {n_nodes} nodes, {n_nodes * 8} cards, {n_jobs} jobs in {time.perf_counter() - started:.0f}s"
        )
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-admin"))
    print(f"{'page':<28} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}  status")
    worst = 0.0
    for label, url in PAGES:
        client.get(url)  # warm
        times = []
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            client.get(url)
            times.append(time.perf_counter() - t0)
        times.sort()
        p50 = times[len(times) // 2] * 1e3
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))] * 1e3
        worst = max(worst, p95)
        print(f"{label:<28} {p50:>8.1f} {p95:>8.1f} {len(ctx.captured_queries):>8}  {response.status_code}")
    print(f"worst p95: {worst:.1f} ms (goal: under 300 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
