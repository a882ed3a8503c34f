"""Metering and month close at scale: 2,000 devices, 50 projects, 100,000 allocations.

Synthetic fleet: 250 nodes × 8 cards (A100 80GB SXM4, T4, Ascend 910B3, Hygon DCU with their
coefficients), 50 projects, 100,000 released allocations of 1–6 hours spread over September 2026
(whole cards and slices; some cross into October), rate cards per model plus a mid-month change.

- suanchi: ``metering_run`` over the month (set-based: one INSERT … SELECT of every slice in SQL), then
  ``month_close`` (re-meters idempotently, builds 50 bills with grouped queries, idle cost spread,
  finalizes) — the production paths.
- baseline: a naive per-row implementation measured in the same run on a subset (August, BENCH_SUBSET
  allocations): a rate-card query and a get_or_create per slice, then a close that loads every entry
  as an object and saves each bill line one by one.

Prints seconds and entries per second for each; nothing is asserted on time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_billing python benchmarks/billing_close_month.py
"""

from __future__ import annotations

import os
import random
import time
import uuid
from datetime import date, timedelta
from decimal import Decimal

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_billing")

import django  # noqa: E402

NODES = int(os.environ.get("BENCH_NODES", 250))
PROJECTS = int(os.environ.get("BENCH_PROJECTS", 50))
ALLOCATIONS = int(os.environ.get("BENCH_ALLOCATIONS", 100_000))
SUBSET = int(os.environ.get("BENCH_SUBSET", 1_000))
MODELS = [
    ("A100 80GB SXM4", "a100", "1.0", "15"),
    ("T4", "t4", "0.2083", "6"),
    ("Ascend 910B3", "910b3", "0.8", "9.5"),
    ("DCU Z100", "dcu", "0.3", "5"),
]


def build(rng: random.Random):
    from apps.accounts.models import Department, Project
    from apps.billing import services
    from apps.catalog.models import ComputeCoefficient, DeviceModel
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.jobs.models import Job

    models = []
    for name, slug, coef, price in MODELS:
        model = DeviceModel.objects.create(
            vendor="nvidia", kind="gpu", name=name, slug=slug, memory_mib=32768
        )
        ComputeCoefficient.objects.create(
            device_model=model, value=Decimal(coef), effective_from=date(2024, 1, 1)
        )
        services.rate_card_create(
            actor="bench",
            name=f"{slug} H1",
            scope="device_model",
            device_model=model,
            price_per_cu_hour=Decimal(price),
            effective_from=date(2026, 1, 1),
            effective_to=date(2026, 9, 15),
        )
        services.rate_card_create(
            actor="bench",
            name=f"{slug} H2",
            scope="device_model",
            device_model=model,
            price_per_cu_hour=Decimal(price) * Decimal("1.1"),
            effective_from=date(2026, 9, 16),
        )
        models.append((model, Decimal(coef)))
    services.rate_card_create(
        actor="bench", name="default", price_per_cu_hour=Decimal("8"), effective_from=date(2026, 1, 1)
    )
    cluster = Cluster.objects.create(name="bench", slug="bench")
    pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
    nodes = Node.objects.bulk_create(
        [Node(cluster=cluster, pool=pool, name=f"n{i:04d}") for i in range(NODES)]
    )
    devices = []
    for i, node in enumerate(nodes):
        model, _coef = models[i % len(models)]
        devices += [
            Device(node=node, vendor="nvidia", device_model=model, index=k, uuid=f"{node.name}-{k}")
            for k in range(8)
        ]
    devices = Device.objects.bulk_create(devices, batch_size=2000)
    Device.objects.update(created_at=services.month_bounds(date(2026, 8, 1))[0])
    department = Department.objects.create(name="bench", slug="bench")
    projects = Project.objects.bulk_create(
        [
            Project(department=department, name=f"项目 {i:02d}", slug=f"p{i:02d}", namespace=f"p{i:02d}")
            for i in range(PROJECTS)
        ]
    )
    coef_of = {m.pk: c for m, c in models}
    return projects, devices, coef_of, Job


def allocations(
    rng, projects, devices, coef_of, Job, *, count: int, month_start, jobs_per_project: int, prefix: str
):
    from apps.jobs.models import Allocation

    jobs = Job.objects.bulk_create(
        [
            Job(
                project=p,
                name=f"{prefix}-{p.slug}-{j}",
                image="x",
                request_kind="whole_cards",
                state="succeeded",
            )
            for p in projects
            for j in range(jobs_per_project)
        ],
        batch_size=2000,
    )
    rows = []
    # Each card's allocations follow one another (gaps of up to 6 h, 1–6 h long), so no card is ever
    # over-booked: month close replays the capacity invariant and refuses a month that breaks it.
    cursor = {d.pk: month_start for d in devices}
    month_end = month_start + timedelta(days=30)
    for i in range(count):
        device = devices[rng.randrange(len(devices))]
        milli = rng.choice([1000, 1000, 500, 250])
        start = cursor[device.pk] + timedelta(minutes=rng.randrange(0, 6 * 60))
        end = start + timedelta(minutes=rng.randrange(60, 6 * 60))
        if end > month_end:  # this card's month is full: take the emptiest card instead
            device = min(devices, key=lambda d: cursor[d.pk])
            start = cursor[device.pk]
            end = start + timedelta(minutes=60)
        cursor[device.pk] = end
        rows.append(
            Allocation(
                job=jobs[i % len(jobs)],
                project_id=jobs[i % len(jobs)].project_id,
                device=device,
                node_id=device.node_id,
                replica=i // len(jobs),
                whole_card=milli == 1000,
                memory_mib=1024,
                compute_milli=milli,
                compute_units=(coef_of[device.device_model_id] * milli / 1000).quantize(Decimal("0.0001")),
                trace_id=uuid.uuid4(),
                started_at=start,
                released_at=end,
            )
        )
    Allocation.objects.bulk_create(rows, batch_size=5000)


def naive_meter(start, end) -> int:
    """Per row: one allocation at a time, a rate-card query and a get_or_create per hourly slice."""
    from django.db.models import Q

    from apps.billing import services
    from apps.billing.models import RateCard, UsageEntry
    from apps.jobs.models import Allocation

    made = 0
    for alloc in Allocation.objects.filter(started_at__gte=start, started_at__lt=end).select_related(
        "job", "device", "node"
    ):
        hour = services.floor_hour(alloc.started_at)
        while hour < alloc.released_at:
            a, b = max(hour, alloc.started_at), min(hour + timedelta(hours=1), alloc.released_at)
            hours = services._hours(b - a)
            day = hour.date()
            card = (
                RateCard.objects.filter(device_model=alloc.device.device_model, effective_from__lte=day)
                .filter(Q(effective_to__isnull=True) | Q(effective_to__gte=day))
                .first()
            )
            price = card.price_per_cu_hour if card else Decimal(0)
            cu_hours = (alloc.compute_units * hours).quantize(Decimal("0.000001"))
            _entry, created = UsageEntry.objects.get_or_create(
                allocation=alloc,
                slice_start=a,
                defaults={
                    "project_id": alloc.job.project_id,
                    "job": alloc.job,
                    "device_model_id": alloc.device.device_model_id,
                    "pool_id": alloc.node.pool_id,
                    "month": date(hour.year, hour.month, 1),
                    "slice_end": b,
                    "hours": hours,
                    "compute_units": alloc.compute_units,
                    "cu_hours": cu_hours,
                    "rate_card": card,
                    "unit_price": price,
                    "amount": (cu_hours * price).quantize(Decimal("0.000001")),
                },
            )
            made += created
            hour += timedelta(hours=1)
    return made


def naive_close(month) -> int:
    """Per row: every entry loaded as an object, sums in Python, each bill line saved on its own."""
    from apps.accounts.models import Project
    from apps.billing import services
    from apps.billing.models import Bill, BillingPeriod, BillLine, UsageEntry

    period = BillingPeriod.objects.create(month=month, state="closing")
    seen = 0
    for project in Project.objects.select_related("department"):
        by_model: dict = {}
        by_job: dict = {}
        total = Decimal(0)
        for entry in UsageEntry.objects.filter(month=month, project=project).select_related(
            "device_model", "job"
        ):
            seen += 1
            total += entry.amount
            by_model[entry.device_model.name] = (
                by_model.get(entry.device_model.name, Decimal(0)) + entry.amount
            )
            by_job[entry.job.name] = by_job.get(entry.job.name, Decimal(0)) + entry.amount
        usage = services.to_cents(total)
        bill = Bill.objects.create(
            project=project, period=period, month=month, usage_amount=usage, total=usage
        )
        for group, parts in (("resource", by_model), ("job", by_job)):
            for (label, _raw), cents in zip(
                parts.items(), services.allocate_cents(list(parts.values()), usage), strict=True
            ):
                BillLine(bill=bill, group=group, label=label, amount=cents).save()
        bill.state = "finalized"
        from django.utils import timezone

        bill.finalized_at = timezone.now()
        # A finalized bill carries the names its documents print (as the real close writes them).
        bill.project_name, bill.project_slug = project.name, project.slug
        bill.department_name = project.department.name
        bill.save()
    period.state = "closed"
    period.save()
    return seen


def main() -> None:
    ensure_database()
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from apps.billing import services
    from apps.billing.models import UsageEntry

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE billing_billline, billing_bill, billing_adjustment, billing_usageentry, billing_billingperiod, "
            "billing_ratecarddiscount, billing_ratecard, scheduling_allocation, jobs_jobevent, jobs_job, "
            "inventory_device, inventory_node, inventory_pool, inventory_cluster, catalog_computecoefficient, "
            "catalog_devicemodel, accounts_membership, accounts_project, accounts_department, core_changerecord CASCADE"
        )
    rng = random.Random(7)
    projects, devices, coef_of, Job = build(rng)
    september, august = date(2026, 9, 1), date(2026, 8, 1)
    sep_start, sep_end = services.month_bounds(september)
    aug_start, aug_end = services.month_bounds(august)
    allocations(
        rng,
        projects,
        devices,
        coef_of,
        Job,
        count=ALLOCATIONS,
        month_start=sep_start,
        jobs_per_project=100,
        prefix="sep",
    )
    allocations(
        rng,
        projects,
        devices,
        coef_of,
        Job,
        count=SUBSET,
        month_start=aug_start,
        jobs_per_project=2,
        prefix="aug",
    )
    print(
        f"fleet: {len(devices)} devices, {len(projects)} projects; {ALLOCATIONS} allocations in 2026-09 (PostgreSQL)"
    )

    t0 = time.perf_counter()
    base_made = naive_meter(aug_start, aug_end)
    base_meter_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    base_seen = naive_close(august)
    base_close_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    metered = services.metering_run(start=sep_start, end=sep_end, actor="bench")
    meter_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    period = services.month_close(month=september, actor="bench", idle_policy="spread")
    close_s = time.perf_counter() - t0
    entries = UsageEntry.objects.filter(month=september).count()
    t0 = time.perf_counter()
    again = services.metering_run(start=sep_start, end=sep_end, actor="bench")
    remeter_s = time.perf_counter() - t0

    print(
        f"baseline metering (per row, {SUBSET} allocations)   {base_meter_s:8.2f} s  {base_made / base_meter_s:10.0f} entries/s  ({base_made} entries)"
    )
    print(
        f"suanchi metering ({metered.allocations} allocations)      {meter_s:8.2f} s  {metered.created / meter_s:10.0f} entries/s  ({metered.created} entries)"
    )
    print(
        f"baseline close (per row, {base_seen} entries)        {base_close_s:8.2f} s  {base_seen / base_close_s:10.0f} entries/s"
    )
    print(
        f"suanchi close (re-meter + {period.bills.count()} bills)          {close_s:8.2f} s  {entries / close_s:10.0f} entries/s  "
        f"(idle cost {period.idle_cost}, state {period.state})"
    )
    print(f"re-metering the closed month: {again.created} new, {again.late} late, {remeter_s:.2f} s")
    print(
        f"ratio metering suanchi / baseline: {(metered.created / meter_s) / (base_made / base_meter_s):.1f}x; "
        f"close: {(entries / close_s) / (base_seen / base_close_s):.1f}x"
    )
    bills = list(period.bills.all())
    print(
        f"bills add up: {all(b.total == b.usage_amount + b.adjustments_amount + b.idle_share_amount for b in bills)}"
    )


if __name__ == "__main__":
    main()
