"""List pages and list endpoints at scale: p95 per page with 10,000 nodes, 80,000 cards, 200,000 jobs.

The dataset is written into a PostgreSQL database of its own: two device models, 10 projects with
quotas, jobs in every state, an active allocation per running job (bulk_create), then the history
tables a fleet of that size has (``build_history``, plain INSERT … SELECT): two events per job, one
device event per node and per four cards, ten hourly usage entries per allocation, a year of bills,
half an hour of 5-minute rollups per card (and the fleet rollups, fleet totals and card summaries ingest would write beside them) and
the running jobs' utilization (and the job summaries attribution writes beside it). ``--no-build`` migrates the existing dataset first. Each page is requested
REPEAT times through Django's test client (the whole stack: middleware, view, template or
serializer) as a platform administrator, and the pages a project member opens also as a member of
one project; prints p50 / p95 in ms and the number of SQL queries. The goal (issue 20) is p95 under
300 ms. Figures only.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_pages python benchmarks/pages_at_scale.py [--quick]
        [--full] [--no-build] [--only SUBSTRING] [--repeat N]

``--full`` is issue 31's size (12,500 nodes, 100,000 cards, 1,000,000 jobs; the jobs and allocations
go in with bulk_create in batches of 5,000, the history in INSERT … SELECT); the default stays at
10,000 nodes / 200,000 jobs so a run is bearable on a small machine. ``PAGES_NODES`` / ``PAGES_JOBS``
set any other size.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from decimal import Decimal

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_pages")

import django  # noqa: E402

# (label, url, as whom: "admin" or "member")
PAGES = [
    ("jobs page", "/jobs/", "admin"),
    ("jobs page, pending", "/jobs/?state=pending", "admin"),
    ("jobs page, sorted by CU", "/jobs/?sort=-cu", "admin"),
    ("jobs page, page 100", "/jobs/?page=100", "admin"),
    ("jobs page (member)", "/jobs/", "member"),
    ("nodes page", "/inventory/nodes/", "admin"),
    ("devices page", "/inventory/devices/", "admin"),
    ("devices page (member)", "/inventory/devices/", "member"),
    ("fleet overview", "/inventory/", "admin"),
    ("fleet overview (member)", "/inventory/", "member"),
    ("quotas overview", "/quotas/", "admin"),
    ("quotas overview (member)", "/quotas/", "member"),
    ("queue board", "/quotas/board/", "admin"),
    # "/" redirects (302) to the fleet overview (apps.core.views.home): the page a user lands on.
    ("home dashboard", "/inventory/", "admin"),
    ("home dashboard (member)", "/inventory/", "member"),
    ("allocations (admin list)", "/admin/jobs/allocation/", "admin"),
    ("bills page", "/billing/", "admin"),
    ("job costs page", "/billing/jobs/", "admin"),
    ("ledger (console)", "/billing/console/ledger/", "admin"),
    ("telemetry report", "/telemetry/", "admin"),
    ("telemetry (member)", "/telemetry/", "member"),
    ("telemetry report by pool", "/telemetry/?group_by=pool", "admin"),
    ("billing console", "/billing/console/", "admin"),
    ("adjustments (console)", "/billing/console/adjustments/", "admin"),
    ("rate cards (console)", "/billing/console/rate-cards/", "admin"),
    ("job costs page (member)", "/billing/jobs/", "member"),
    ("rollout batches", "/rollout/", "admin"),
    ("clusters page", "/clusters/", "admin"),
    ("jobs API", "/api/jobs/jobs/", "admin"),
    ("jobs API (member)", "/api/jobs/jobs/", "member"),
    ("nodes API", "/api/inventory/nodes/", "admin"),
    ("devices API", "/api/inventory/devices/", "admin"),
    ("device events API", "/api/inventory/device-events/", "admin"),
    ("pools API", "/api/inventory/pools/", "admin"),
    ("quotas API", "/api/quotas/quotas/", "admin"),
    ("quota usage API", "/api/quotas/quotas/usage/", "admin"),
    ("usage entries API", "/api/billing/usage-entries/", "admin"),
    ("bills API", "/api/billing/bills/", "admin"),
    ("rollups API", "/api/telemetry/rollups/", "admin"),
    ("projects API", "/api/accounts/projects/", "admin"),
    ("gray batches API", "/api/rollout/batches/", "admin"),
]


def build(n_nodes: int, n_jobs: int) -> None:
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
            "accounts_project, accounts_department, billing_billingperiod CASCADE"
        )
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
                project=projects[(i // len(states)) % len(projects)],  # every project has jobs in every state
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
                project_id=job.project_id,  # bulk_create skips save(), which would fill it
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


# The history tables, written in SQL (INSERT … SELECT) from the rows build() made: a fleet this size
# has far more history than live rows, and bulk_create of millions of objects takes too long here.
HISTORY_SQL = [
    # two events per job: submitted, then its state change
    """INSERT INTO jobs_jobevent (created_at, kind, from_state, to_state, message, actor_label, data, job_id)
       SELECT j.created_at, 'submitted', '', 'pending', 'Submitted.', 'bench', '{}'::jsonb, j.id FROM jobs_job j
       UNION ALL
       SELECT j.created_at + interval '1 minute', 'state', 'pending', j.state, 'State changed.', '', '{}'::jsonb, j.id
       FROM jobs_job j WHERE j.state <> 'pending'""",
    # one event per node, one per four cards
    """INSERT INTO inventory_deviceevent (created_at, kind, severity, message, before, after, actor_label, device_id,
           node_id, report_id)
       SELECT now() - (n.id % 1000) * interval '1 minute', 'registered', 'info', 'Node registered.', NULL::jsonb, NULL::jsonb,
           '', NULL::bigint, n.id, NULL::bigint FROM inventory_node n
       UNION ALL
       SELECT now() - (d.id % 1000) * interval '1 minute', 'health_changed', 'warning', 'Health changed.',
           '{"health": "healthy"}'::jsonb, '{"health": "degraded"}'::jsonb, '', d.id, d.node_id, NULL::bigint
       FROM inventory_device d WHERE d.id % 4 = 0""",
    # twelve closed months and the open one; a bill per project and closed month, three lines each
    """INSERT INTO billing_billingperiod (month, state, idle_policy, currency, idle_cu_hours, idle_cost, platform_cost,
           closed_at, closed_by, created_at, updated_at, close_run_id)
       SELECT (date_trunc('month', now()) - m * interval '1 month')::date, CASE WHEN m = 0 THEN 'open' ELSE 'closed' END,
           'none', 'CNY', 0, 0, 0, CASE WHEN m = 0 THEN NULL ELSE now() END, '', now(), now(), NULL
       FROM generate_series(0, 12) m""",
    """INSERT INTO billing_bill (month, state, currency, used_cu_hours, guaranteed_cu_hours, entry_count, usage_amount,
           adjustments_amount, idle_share_amount, total, finalized_at, created_at, project_id, period_id,
           project_name, project_slug, department_name)
       SELECT p.month, 'draft', 'CNY', 1000, 800, 100, 1000, 0, 0, 1000, NULL, now(), pr.id, p.id, pr.name,
           pr.slug, 'd'
       FROM billing_billingperiod p CROSS JOIN accounts_project pr WHERE p.state = 'closed'""",
    """INSERT INTO billing_billline ("group", position, label, cu_hours, amount, bill_id, device_model_id, job_id,
           template_id)
       SELECT 'resource', k, 'line ' || k, 300, 300, b.id, NULL, NULL, NULL
       FROM billing_bill b CROSS JOIN generate_series(1, 3) k""",
    # finalized once their lines are in (a finalized bill takes no new lines: billing's trigger)
    "UPDATE billing_bill SET state = 'finalized', finalized_at = now()",
    # ten hourly usage entries per allocation
    """INSERT INTO billing_usageentry (month, slice_start, slice_end, hours, compute_units, basis, cu_hours, unit_price,
           discount_percent, currency, amount, late, metered_at, allocation_id, device_model_id, job_id, pool_id,
           project_id, rate_card_id, template_id)
       SELECT date_trunc('month', s.t)::date, s.t, s.t + interval '1 hour', 1, a.compute_units, 'allocated',
           a.compute_units, 10, 0, 'CNY', a.compute_units * 10, false, now(), a.id, d.device_model_id, a.job_id,
           n.pool_id, j.project_id, NULL, NULL
       FROM scheduling_allocation a JOIN jobs_job j ON j.id = a.job_id JOIN inventory_device d ON d.id = a.device_id
           JOIN inventory_node n ON n.id = a.node_id
           CROSS JOIN LATERAL (SELECT date_trunc('hour', now()) - k * interval '1 hour' AS t
                               FROM generate_series(1, 10) k) s""",
    # half an hour of 5-minute rollups per card, and the running jobs' share of them
    """INSERT INTO telemetry_devicerollup (partition, resolution, window_start, source, quality, scrape_interval_s,
           sample_count, first_sample_at, last_sample_at, util_sum, util_n, util_avg, util_max, mem_used_sum,
           mem_used_n, mem_used_avg_mib, mem_used_max_mib, mem_total_mib, temp_max_c, power_sum, power_n,
           power_avg_w, error_deltas, counters_last, health, pods, updated_at, device_id)
       SELECT '', 300, w.t, 'bench', 'exact', 15, 20, w.t, w.t + interval '285 seconds', w.u * 20, 20, w.u, w.u,
           800000, 20, 40000, 40000, 81920, 60, 6000, 20, 300, '{}'::jsonb, '{}'::jsonb, '{}'::jsonb, '[]'::jsonb,
           now(), d.id
       FROM inventory_device d
           CROSS JOIN LATERAL (SELECT date_trunc('hour', now()) - k * interval '5 minutes' AS t,
                                      ((d.id * 7 + k * 13) % 100)::float AS u
                               FROM generate_series(1, 6) k) w""",
    """INSERT INTO telemetry_jobutilization (window_start, source, quality, share, busy_pct, mem_used_avg_mib,
           project_id_snapshot, device_id, job_id)
       SELECT w.t, 'bench', 'exact', 1, 50, 40000, j.project_id, a.device_id, a.job_id
       FROM scheduling_allocation a JOIN jobs_job j ON j.id = a.job_id
           CROSS JOIN LATERAL (SELECT date_trunc('hour', now()) - k * interval '5 minutes' AS t
                               FROM generate_series(1, 6) k) w""",
    "ANALYZE",
]


def build_history() -> None:
    from django.db import connection, transaction

    from apps.telemetry.services import HOUR_S, WINDOW_S, fleet_rollups_rebuild, job_summaries_rebuild

    with transaction.atomic(), connection.cursor() as cursor:
        for sql in HISTORY_SQL:
            cursor.execute(sql)
        # What ingest writes beside the card rollups (the SQL above bypasses ingest).
        for resolution in (WINDOW_S, HOUR_S):
            fleet_rollups_rebuild(resolution=resolution)
        cursor.execute("ANALYZE telemetry_fleetrollup")
        cursor.execute("ANALYZE telemetry_cardsummary")  # rebuilt with the fleet rollups
        cursor.execute("ANALYZE telemetry_fleettotal")  # and so are the fleet totals
        job_summaries_rebuild()  # what attribution writes beside the job utilization rows
        cursor.execute("ANALYZE telemetry_jobsummary")


def vacuum() -> None:
    """VACUUM (ANALYZE) the fresh dataset, as autovacuum would on a live database before anyone looks:
    without it no query answers from an index alone (the visibility map is empty) and a queued-jobs scan
    reads every heap page of a 1,000,000-job table. Outside a transaction, as VACUUM must be."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
    print(f"vacuumed in {time.perf_counter() - started:.0f}s")


def ensure_users():
    """The platform administrator and a member of one project (pages as a member sees them)."""
    from django.contrib.auth import get_user_model

    from apps.accounts.models import Membership, Project

    user_model = get_user_model()
    admin = user_model.objects.filter(username="bench-admin").first() or user_model.objects.create_user(
        "bench-admin", is_staff=True, is_superuser=True
    )  # no password: force_login
    member = user_model.objects.filter(username="bench-member").first() or user_model.objects.create_user(
        "bench-member"
    )
    Membership.objects.get_or_create(
        user=member, project=Project.objects.order_by("slug").first(), defaults={"role": "member"}
    )
    return {"admin": admin, "member": member}


def _measure(client, url: str, repeat: int) -> tuple[float, float, int, int]:
    """(p50 ms, p95 ms, SQL queries of one request, status)."""
    from django.db import connection

    client.get(url)  # warm
    queries = []
    with connection.execute_wrapper(
        lambda execute, sql, params, many, context: queries.append(sql) or execute(sql, params, many, context)
    ):
        response = client.get(url)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        client.get(url)
        times.append(time.perf_counter() - t0)
    times.sort()
    p50 = times[len(times) // 2] * 1e3
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))] * 1e3
    return p50, p95, len(queries), response.status_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 nodes / 20,000 jobs")
    parser.add_argument(
        "--full", action="store_true", help="12,500 nodes / 100,000 cards / 1,000,000 jobs (issue 31's goal)"
    )
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-build", action="store_true", help="reuse the dataset of the last run")
    parser.add_argument("--only", default="", help="only the pages whose label or URL contains this")
    args = parser.parse_args(argv)
    n_nodes, n_jobs = (1000, 20000) if args.quick else (12500, 1000000) if args.full else (10000, 200000)
    # PAGES_NODES / PAGES_JOBS override either size (8 cards a node).
    n_nodes = int(os.environ.get("PAGES_NODES", n_nodes))
    n_jobs = int(os.environ.get("PAGES_JOBS", n_jobs))
    ensure_database()
    django.setup()
    from django.test import Client
    from django.test.utils import setup_test_environment

    from apps.jobs.models import JobEvent

    setup_test_environment()  # the test client's host ("testserver") is allowed, as under pytest
    if args.no_build:
        from django.core.management import call_command

        # A dataset of an earlier run gets the later migrations (and their backfills, e.g. the fleet
        # rollups from the card rollups already there).
        call_command("migrate", verbosity=0)
    else:
        started = time.perf_counter()
        build(n_nodes, n_jobs)
        print(
            f"dataset: {n_nodes} nodes, {n_nodes * 8} cards, {n_jobs} jobs in {time.perf_counter() - started:.0f}s"
        )
    if not JobEvent.objects.exists():  # a dataset built before the history tables were part of it
        started = time.perf_counter()
        build_history()
        print(f"history tables written in {time.perf_counter() - started:.0f}s")
        vacuum()
    clients = {}
    for role, user in ensure_users().items():
        clients[role] = Client()
        clients[role].force_login(user)
    print(f"{'page':<28} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}  status")
    worst = 0.0
    for label, url, role in PAGES:
        if args.only and args.only not in label and args.only not in url:
            continue
        p50, p95, n_queries, status = _measure(clients[role], url, args.repeat)
        worst = max(worst, p95)
        print(f"{label:<28} {p50:>8.1f} {p95:>8.1f} {n_queries:>8}  {status}", flush=True)
    print(f"worst p95: {worst:.1f} ms (goal: under 300 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
