"""List pages and list endpoints answer in a number of queries that does not grow with the rows
(no N+1), and read from the database a number of rows that does not grow with the fleet either (a
page of 50 reads its 50 rows and some aggregates, never every job, card or node): each is measured
on a fleet larger than one page and again on one three times larger.

The timing at 10,000 nodes / 80,000 cards / 200,000 jobs is ``benchmarks/pages_at_scale.py`` (figures,
not timed tests)."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from apps.accounts.models import Membership
from apps.billing.models import Bill, BillingPeriod, UsageEntry
from apps.catalog.models import DeviceModel
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.jobs.models import Allocation, Job, JobEvent
from apps.quotas.models import Quota
from apps.telemetry.models import DeviceRollup, JobUtilization
from apps.telemetry.services import fleet_rollups_rebuild

pytestmark = pytest.mark.django_db

# (label, url, as whom, most queries allowed at any size)
PAGES = [
    ("jobs page", "/jobs/", "staff", 40),
    ("jobs page, sorted", "/jobs/?sort=-cu", "staff", 40),
    ("jobs page, one state", "/jobs/?state=pending", "staff", 40),
    ("jobs page (member)", "/jobs/", "member", 40),
    ("nodes page", "/inventory/nodes/", "staff", 40),
    ("devices page", "/inventory/devices/", "staff", 40),
    ("devices page (member)", "/inventory/devices/", "member", 40),
    ("fleet overview", "/inventory/", "staff", 60),
    ("quotas overview", "/quotas/", "staff", 60),
    ("allocations (admin list)", "/admin/jobs/allocation/", "staff", 40),
    ("bills page", "/billing/", "staff", 40),
    ("job costs page", "/billing/jobs/", "staff", 40),
    ("job costs page, page 2", "/billing/jobs/?page=2", "staff", 40),
    ("job costs page (member)", "/billing/jobs/", "member", 40),
    ("ledger (console)", "/billing/console/ledger/", "staff", 40),
    ("telemetry report", "/telemetry/", "staff", 60),
    ("telemetry report by pool", "/telemetry/?group_by=pool", "staff", 60),
    ("quotas overview (member)", "/quotas/", "member", 60),
    ("jobs API", "/api/jobs/jobs/", "staff", 25),
    ("jobs API (member)", "/api/jobs/jobs/", "member", 25),
    ("nodes API", "/api/inventory/nodes/", "staff", 25),
    ("devices API", "/api/inventory/devices/", "staff", 25),
    ("device events API", "/api/inventory/device-events/", "staff", 25),
    ("quota usage API", "/api/quotas/quotas/usage/", "staff", 40),
    ("usage entries API", "/api/billing/usage-entries/", "staff", 25),
    ("bills API", "/api/billing/bills/", "staff", 25),
    ("rollups API", "/api/telemetry/rollups/", "staff", 25),
]
# More rows a page may read on the larger fleet: another month's bills and the like, never a page
# of rows more (every list has more than a page of rows on the smaller fleet already).
MORE_ROWS = 30
_seq = itertools.count()


def grow(n_nodes: int, n_jobs: int, *, models, pool, projects, period) -> None:
    """Add nodes (8 cards each, an event each), jobs in every state (an event each), active allocations
    for the running ones with two hourly usage entries and a 5-minute rollup per card, and a bill per
    project for a month of its own."""
    k = next(_seq)
    now = timezone.now()
    nodes, devices = _grow_nodes(k, n_nodes, models=models, pool=pool)
    allocations = _grow_jobs(k, n_jobs, now, models=models, projects=projects, devices=devices)
    hour = now.replace(minute=0, second=0, microsecond=0)
    UsageEntry.objects.bulk_create(
        UsageEntry(
            project_id=a.job.project_id,
            job=a.job,
            allocation=a,
            device_model=models[0],
            pool=pool,
            month=period.month,
            slice_start=hour - dt.timedelta(hours=h),
            slice_end=hour - dt.timedelta(hours=h - 1),
            hours=Decimal(1),
            compute_units=Decimal(1),
            cu_hours=Decimal(1),
            unit_price=Decimal(10),
            amount=Decimal(10),
        )
        for a in allocations
        for h in (1, 2)
        if hour - dt.timedelta(hours=h) >= dt.datetime.combine(period.month, dt.time(), tzinfo=dt.UTC)
    )
    window = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=now.minute % 5 + 10)
    DeviceRollup.objects.bulk_create(
        DeviceRollup(
            device=device,
            window_start=window,
            source="test",
            sample_count=20,
            first_sample_at=window,
            last_sample_at=window + dt.timedelta(seconds=285),
            util_sum=20.0 * (i % 90 + 10),
            util_n=20,
            util_avg=float(i % 90 + 10),
            util_max=float(i % 90 + 10),
        )
        for i, device in enumerate(devices)
    )
    # What ingest writes in the same transaction: the fleet rollups of the touched windows and nodes.
    fleet_rollups_rebuild(resolution=300, source="test", windows=[window], node_ids=[n.pk for n in nodes])
    JobUtilization.objects.bulk_create(
        JobUtilization(
            job=a.job,
            device=a.device,
            window_start=window,
            source="test",
            quality="exact",
            share=1.0,
            busy_pct=50.0,
            project_id_snapshot=a.job.project_id,
        )
        for a in allocations
    )
    month = dt.date(2020 + k, 1, 1)
    closed = BillingPeriod.objects.create(month=month, state=BillingPeriod.State.CLOSED)
    Bill.objects.bulk_create(
        Bill(project=p, period=closed, month=month, total=Decimal(100), usage_amount=Decimal(100))
        for p in projects
    )


def _grow_nodes(k: int, n_nodes: int, *, models, pool) -> tuple[list, list]:
    """``n_nodes`` nodes of 8 cards (the models alternating by node), a registration event each."""
    nodes = Node.objects.bulk_create(
        Node(
            cluster=pool.cluster,
            pool=pool,
            name=f"n{k}-{i:04d}",
            driver_version="550.54.15",
            labels={"zone": "a"},
            switch=f"leaf-{i // 16}",
        )
        for i in range(n_nodes)
    )
    devices = Device.objects.bulk_create(
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
    )
    DeviceEvent.objects.bulk_create(
        DeviceEvent(node=node, kind=DeviceEvent.Kind.REGISTERED, message="registered") for node in nodes
    )
    return nodes, devices


def _grow_jobs(k: int, n_jobs: int, now, *, models, projects, devices) -> list:
    """``n_jobs`` jobs in every state (a submission event each); the running ones hold a card of the
    first model each, for three hours."""
    states = ["pending", "running", "running", "succeeded", "failed"]
    jobs = Job.objects.bulk_create(
        Job(
            project=projects[(i // len(states)) % len(projects)],
            name=f"j{k}-{i}",
            image="x",
            request_kind="whole_cards",
            device_model=models[0],
            count=1,
            state=states[i % len(states)],
            requested_cu=Decimal(i % 7 + 1),
        )
        for i in range(n_jobs)
    )
    JobEvent.objects.bulk_create(
        JobEvent(job=job, kind=JobEvent.Kind.SUBMITTED, message="submitted") for job in jobs
    )
    running = [j for j in jobs if j.state == "running"]
    free = [d for d in devices if d.device_model_id == models[0].pk]
    allocations = Allocation.objects.bulk_create(
        Allocation(
            job=job,
            project_id=job.project_id,
            device=device,
            node_id=device.node_id,
            whole_card=True,
            memory_mib=81920,
            compute_milli=1000,
            compute_units=Decimal("1"),
            trace_id=uuid.uuid4(),
            started_at=now - dt.timedelta(hours=3),
        )
        for job, device in zip(running, free, strict=False)
    )
    return allocations


@pytest.fixture
def fleet(make_project, make_user):
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
    projects = [make_project(f"p{i}") for i in range(3)]
    for project in projects:
        Quota.objects.create(project=project, guaranteed_cu=Decimal("8"), borrowing_limit_cu=Decimal("4"))
    member = make_user("scale-member")
    Membership.objects.create(user=member, project=projects[0], role=Membership.Role.MEMBER)
    today = timezone.localdate()
    period = BillingPeriod.objects.create(month=today.replace(day=1), state=BillingPeriod.State.OPEN)
    return {"models": models, "pool": pool, "projects": projects, "period": period, "member": member}


def _measure(client, url: str) -> tuple[int, int]:
    """(queries, rows read) of one request."""
    queries = rows = 0

    def count(execute, sql, params, many, context):
        nonlocal queries, rows
        result = execute(sql, params, many, context)
        queries += 1
        if sql.lstrip().upper().startswith("SELECT") and context["cursor"].rowcount > 0:
            rows += context["cursor"].rowcount
        return result

    with connection.execute_wrapper(count):
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return queries, rows


def test_list_pages_and_endpoints_do_not_grow_with_the_fleet(
    client, staff_user, fleet, django_assert_max_num_queries
):
    from django.test import Client

    clients = {"staff": client, "member": Client()}
    client.force_login(staff_user)
    clients["member"].force_login(fleet.pop("member"))
    grow(51, 300, **fleet)  # more than a page of nodes, cards, jobs, allocations, entries
    for _label, url, role, _most in PAGES:  # warm per-process caches (catalog, settings) before counting
        clients[role].get(url)
    small = {url: _measure(clients[role], url) for _label, url, role, _most in PAGES}
    grow(102, 600, **fleet)  # three times the rows
    big = {url: _measure(clients[role], url) for _label, url, role, _most in PAGES}
    more_queries = [
        f"{label}: {small[url][0]} -> {big[url][0]}"
        for label, url, _role, _most in PAGES
        if big[url][0] > small[url][0] + 1
    ]
    # The same queries for three times the rows (one more for a page count is allowed).
    assert not more_queries, more_queries
    # A page reads its page of rows and aggregates, not rows in proportion to the fleet.
    more_rows = [
        f"{label}: {small[url][1]} -> {big[url][1]} rows"
        for label, url, _role, _most in PAGES
        if big[url][1] > small[url][1] + MORE_ROWS
    ]
    assert not more_rows, more_rows
    for _label, url, role, most in PAGES:
        with django_assert_max_num_queries(most):
            clients[role].get(url)


def _sql_of(client, url: str) -> list[str]:
    seen: list[str] = []

    def keep(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        assert client.get(url).status_code == 200
    return seen


def test_the_fleet_report_and_job_costs_aggregate_once(client, staff_user, fleet):
    """The fleet series, the three figures and the top nodes read the fleet rollups (one row per node
    and window), the idle cards the card summaries, not Σ over the card rollups; the job-cost page reads
    its page and its count from the per-job summary, never the ledger (issue 20, issue 31 §3)."""
    client.force_login(staff_user)
    fleet.pop("member")
    grow(51, 300, **fleet)
    sql = _sql_of(client, "/telemetry/")
    assert any("telemetry_fleetrollup" in q and "GROUP BY" in q for q in sql)
    # Σ per card only for the idle-card candidates (cards with a window at or under the threshold),
    # never over every card of the period; the whole hours from the card summaries (issue 31).
    assert not [q for q in sql if 'SUM("telemetry_devicerollup"."util_sum")' in q]
    card_sums = [q for q in sql if "SUM(x.util_sum)" in q]
    assert card_sums and all("device_id IN (SELECT device_id FROM" in q for q in card_sums), card_sums
    assert all("FROM telemetry_cardsummary" in q for q in card_sums), card_sums
    for url in ("/billing/jobs/", "/billing/jobs/?page=2"):  # the per-job summary, never the ledger
        sql = _sql_of(client, url)
        assert not [q for q in sql if '"billing_usageentry"' in q]
        assert [q for q in sql if 'FROM "billing_jobcosttotal"' in q], sql
