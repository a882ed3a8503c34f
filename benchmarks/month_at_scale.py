"""A 100,000-card month metered and closed (issue 31 §3): 12,500 nodes × 8 cards, 1,000,000 allocations.

Synthetic fleet: BENCH_NODES nodes × BENCH_CARDS cards of four models (A100 80GB SXM4, T4, Ascend 910B3,
Hygon DCU with their coefficients) in four pools, BENCH_PROJECTS projects, BENCH_ALLOCATIONS allocations
over September 2026 (platform time zone): each card's month is a row of segments, a segment either one
whole-card allocation or 2 or 4 concurrent slices (hard isolation, never over-booked); BENCH_PREEMPTED of
them end early (released "preempted"); some start in August or end in October; scale events: 4 % of the
nodes are added on the 11th (cards registered then), 2 % removed on the 21st (cards retired). Telemetry:
one attributed 5-minute rollup (JobUtilization) per allocation-hour, so the "max" usage basis reads
them. Rate cards per model with a mid-month price change, a default card and project discounts.
Allocations and rollups are written with COPY so the setup stays short.

Measured with the production functions, usage basis "max": ``metering_run`` over the month, then
``month_close`` (re-meters, builds every bill, idle cost spread, finalizes), then ``metering_run``
again. Prints seconds per phase and entries/s, and checks that the bills add up: Σ lines = totals,
per card Σ slice card-hours + idle = its in-service card-hours (idle never negative) and Σ idle CU-hours
= the period's, re-metering changes neither the entry count nor the sum. The same figures are printed
first for a smaller fleet (BENCH_SMALL_SHARE of every size, default 1/10) so the ratio shows.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/suanchi_bench_month python benchmarks/month_at_scale.py
    BENCH_NODES=250 BENCH_ALLOCATIONS=20000 python benchmarks/month_at_scale.py   # a smoke run
"""

from __future__ import annotations

import argparse
import os
import random
import time
import uuid
from datetime import date, datetime, timedelta
from decimal import Decimal

from _setup import bootstrap, ensure_database

bootstrap("suanchi_bench_month")

import django  # noqa: E402

NODES = int(os.environ.get("BENCH_NODES", 12_500))
CARDS = int(os.environ.get("BENCH_CARDS", 8))
ALLOCATIONS = int(os.environ.get("BENCH_ALLOCATIONS", 1_000_000))
PROJECTS = int(os.environ.get("BENCH_PROJECTS", 200))
ALLOCATIONS_PER_JOB = int(os.environ.get("BENCH_ALLOCATIONS_PER_JOB", 20))
MEAN_HOURS = float(os.environ.get("BENCH_MEAN_HOURS", 3.5))
PREEMPTED = float(os.environ.get("BENCH_PREEMPTED", 0.1))
SMALL_SHARE = float(os.environ.get("BENCH_SMALL_SHARE", 0.1))  # 0: no smaller run
MODELS = [
    ("A100 80GB SXM4", "a100", "1.0", "15", 81920),
    ("T4", "t4", "0.2083", "6", 15360),
    ("Ascend 910B3", "910b3", "0.8", "9.5", 65536),
    ("DCU Z100", "dcu", "0.3", "5", 32768),
]
MONTH = date(2026, 9, 1)
TABLES = (
    "billing_billline, billing_bill, billing_adjustment, billing_usageentry, billing_billingperiod, "
    "billing_ratecarddiscount, billing_ratecard, telemetry_jobutilization, scheduling_allocation, "
    "jobs_jobevent, jobs_job, inventory_device, inventory_node, inventory_pool, inventory_cluster, "
    "catalog_computecoefficient, catalog_devicemodel, accounts_membership, accounts_project, "
    "accounts_department, core_changerecord, core_backgroundrun"
)


def _copy(model, given: tuple[str, ...], rows) -> int:
    """COPY ``rows`` (tuples of the ``given`` columns) into ``model``'s table; every other concrete
    column but the key gets its field default (auto_now fields: now)."""
    from django.db import connection
    from django.utils import timezone

    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    by_column = {f.column: f for f in fields}
    rest = [f for f in fields if f.column not in given and f.attname not in given]
    defaults = []
    for f in rest:
        value = timezone.now() if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) else None
        defaults.append(f.get_db_prep_save(value if value is not None else f.get_default(), connection))
    columns = [by_column[c].column if c in by_column else c for c in given] + [f.column for f in rest]
    tail = tuple(defaults)
    written = 0
    statement = f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row + tail)
            written += 1
    return written


def build_catalog(scale: float):
    """Models, coefficients, rate cards (a mid-month change), pools, nodes, cards, projects and jobs."""
    from apps.accounts.models import Department, Project
    from apps.billing import services
    from apps.billing.models import RateCard
    from apps.catalog.models import ComputeCoefficient, DeviceModel
    from apps.inventory.models import Cluster, Node, Pool

    models = []
    for name, slug, coef, price, memory in MODELS:
        model = DeviceModel.objects.create(
            vendor="nvidia", kind="gpu", name=name, slug=slug, memory_mib=memory
        )
        ComputeCoefficient.objects.create(
            device_model=model, value=Decimal(coef), effective_from=date(2024, 1, 1)
        )
        for label, begin, until, factor in (
            ("H1", date(2026, 1, 1), date(2026, 9, 15), Decimal(1)),
            ("H2", date(2026, 9, 16), None, Decimal("1.1")),
        ):
            services.rate_card_create(
                actor="bench",
                name=f"{slug} {label}",
                scope="device_model",
                device_model=model,
                price_per_cu_hour=Decimal(price) * factor,
                effective_from=begin,
                effective_to=until,
            )
        models.append((model, Decimal(coef)))
    services.rate_card_create(
        actor="bench", name="default", price_per_cu_hour=Decimal("8"), effective_from=date(2026, 1, 1)
    )
    cluster = Cluster.objects.create(name="bench", slug="bench")
    pools = [Pool.objects.create(cluster=cluster, name=f"pool {m[1]}", slug=f"p-{m[1]}") for m in MODELS]
    nodes = Node.objects.bulk_create(
        [
            Node(cluster=cluster, pool=pools[i % len(pools)], name=f"n{i:05d}")
            for i in range(max(1, int(NODES * scale)))
        ],
        batch_size=5000,
    )
    department = Department.objects.create(name="bench", slug="bench")
    projects = Project.objects.bulk_create(
        [
            Project(department=department, name=f"项目 {i:03d}", slug=f"p{i:03d}", namespace=f"p{i:03d}")
            for i in range(max(2, int(PROJECTS * scale)))
        ]
    )
    cards = {
        c.device_model_id: c for c in RateCard.objects.filter(effective_to__isnull=True, scope="device_model")
    }
    for project in projects[::7]:
        for card in cards.values():
            services.rate_card_discount_set(
                card=card, project=project, percent=Decimal("12.5"), actor="bench"
            )
    return models, nodes, projects


def build_devices(rng: random.Random, models, nodes):
    """Every node's cards via COPY; 4 % of the nodes join on the 11th, 2 % leave on the 21st. Returns
    [(device id, node id, model id, coefficient, memory, in service from, until)]."""
    from apps.billing import services
    from apps.inventory.models import Device

    start, end = services.month_bounds(MONTH)
    joined, left = start + timedelta(days=10), start + timedelta(days=20)
    life = {}
    for node in nodes:
        draw = rng.random()
        life[node.pk] = (
            (joined, end) if draw < 0.04 else (start - timedelta(days=30), left if draw < 0.06 else end)
        )
    rows = []
    for i, node in enumerate(nodes):
        model, _coef = models[i % len(models)]
        for k in range(CARDS):
            rows.append((node.pk, "nvidia", model.pk, k, f"{node.name}-{k}", life[node.pk][0]))
    _copy(Device, ("node_id", "vendor", "device_model_id", "index", "uuid", "created_at"), rows)
    coef = {m.pk: c for m, c in models}
    memory = {m.pk: m.memory_mib for m, _c in models}
    out = []
    for pk, node_id, model_id in Device.objects.order_by("pk").values_list(
        "pk", "node_id", "device_model_id"
    ):
        out.append((pk, node_id, model_id, coef[model_id], memory[model_id], *life[node_id]))
    return out


def _card_month(rng: random.Random, frm: datetime, until: datetime, segments: int):
    """One card's allocations as (start, end, milli, preempted): ``segments`` segments of whole cards or
    2/4 concurrent slices, spread over [frm, until) (the first may start before the month)."""
    span_h = (until - frm).total_seconds() / 3600
    gap_h = max(0.0, span_h / max(1, segments) - MEAN_HOURS)
    t = frm - timedelta(hours=rng.random() * MEAN_HOURS) if rng.random() < 0.05 else frm
    out = []
    for _ in range(segments):
        t += timedelta(minutes=rng.randrange(0, int(2 * gap_h * 60) + 1))
        length = timedelta(minutes=rng.randrange(30, int(2 * MEAN_HOURS * 60)))
        if t + length > until + timedelta(hours=6):
            break
        lanes = rng.choice((1, 1, 1, 2, 4))
        for _lane in range(lanes):
            a = t + timedelta(minutes=rng.randrange(0, 15)) if lanes > 1 else t
            b = t + length
            preempted = rng.random() < PREEMPTED
            if preempted:
                b = a + (b - a) * rng.uniform(0.1, 0.9)
            if b > a:
                out.append((a, b, 1000 // lanes, preempted))
        t += length
    return out


def build_allocations(rng: random.Random, devices, projects, count: int) -> int:
    """Jobs (bulk) and ``count``-ish allocations (COPY) over the month, each card on its own timeline."""
    from apps.jobs.models import Allocation, Job

    per_card = count / max(1, len(devices))
    segments = max(1, round(per_card / 1.8))  # a segment holds 1.8 allocations on average
    plans = []
    for device in devices:
        for a, b, milli, preempted in _card_month(rng, device[5], device[6], segments):
            plans.append((device, a, b, milli, preempted))
    jobs_needed = max(len(projects), len(plans) // ALLOCATIONS_PER_JOB + 1)
    jobs = Job.objects.bulk_create(
        [
            Job(
                project=projects[j % len(projects)],
                name=f"job-{j}",
                image="x",
                request_kind="whole_cards",
                state="succeeded",
            )
            for j in range(jobs_needed)
        ],
        batch_size=5000,
    )
    job_ids = [j.pk for j in jobs]
    project_of = {j.pk: j.project_id for j in jobs}
    rows = []
    for i, (device, a, b, milli, preempted) in enumerate(plans):
        units = (device[3] * milli / 1000).quantize(Decimal("0.0001"))
        rows.append(
            (
                job_ids[i % len(job_ids)],
                project_of[job_ids[i % len(job_ids)]],
                device[0],
                device[1],
                i // len(job_ids),
                milli == 1000,
                min(1024, device[4] * milli // 1000),
                milli,
                units,
                uuid.UUID(int=rng.getrandbits(128)),
                a,
                b,
                "preempted" if preempted else "finished",
            )
        )
    given = (
        "job_id", "project_id", "device_id", "node_id", "replica", "whole_card", "memory_mib", "compute_milli",
        "compute_units", "trace_id", "started_at", "released_at", "release_reason",
    )  # fmt: skip
    return _copy(Allocation, given, rows)


def build_telemetry(rng: random.Random) -> int:
    """One attributed 5-minute rollup per allocation-hour (COPY), busy 0–100 % of the card."""
    from apps.jobs.models import Allocation
    from apps.telemetry.models import JobUtilization

    # Read first: the connection cannot stream a server-side cursor while it COPYs.
    allocations = list(
        Allocation.objects.order_by().values_list(
            "job_id", "device_id", "job__project_id", "compute_milli", "started_at", "released_at"
        )
    )

    def rows():
        for job_id, device_id, project_id, milli, a, b in allocations:
            window = a + timedelta(minutes=(-a.minute) % 5, seconds=-a.second, microseconds=-a.microsecond)
            while window < b:
                busy = rng.random() * 100
                yield (job_id, device_id, window, "bench", "estimated", milli / 1000, busy, project_id)
                window += timedelta(hours=1)

    given = (
        "job_id",
        "device_id",
        "window_start",
        "source",
        "quality",
        "share",
        "busy_pct",
        "project_id_snapshot",
    )
    return _copy(JobUtilization, given, rows())


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {TABLES} CASCADE")


def setup(scale: float) -> dict:
    from apps.inventory.models import Device, Node

    rng = random.Random(31)
    reset()
    t0 = time.perf_counter()
    models, nodes, projects = build_catalog(scale)
    devices = build_devices(rng, models, nodes)
    allocations = build_allocations(rng, devices, projects, int(ALLOCATIONS * scale))
    rollups = build_telemetry(rng)
    # The nodes that left on the 21st: retired with their cards (the close counts no capacity for them).
    month_end = max(d[6] for d in devices)
    left = {d[1] for d in devices if d[6] < month_end}
    Node.objects.filter(pk__in=left).update(status="retired")
    Device.objects.filter(node_id__in=left).update(health="retired", pool_status="retired")
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {
        "nodes": len(nodes),
        "cards": len(devices),
        "projects": len(projects),
        "allocations": allocations,
        "rollups": rollups,
        "setup_s": time.perf_counter() - t0,
    }


def _ledger_figures(month: date) -> tuple[int, Decimal]:
    from django.db.models import Count, Sum

    from apps.billing.models import UsageEntry

    agg = UsageEntry.objects.filter(month=month).aggregate(n=Count("pk"), amount=Sum("amount"))
    return agg["n"], agg["amount"] or Decimal(0)


def check_bills(period) -> list[str]:
    """Σ lines = totals for every bill; Σ bills' usage = Σ per project of the entries, to the cent."""
    from django.db.models import Sum

    from apps.billing.models import Bill, BillLine, UsageEntry
    from apps.billing.pricing import to_cents

    problems = []
    lines = {}
    for bill_id, group, amount in (
        BillLine.objects.filter(bill__period=period)
        .values("bill_id", "group")
        .annotate(s=Sum("amount"))
        .values_list("bill_id", "group", "s")
    ):
        lines[(bill_id, group)] = amount
    used = dict(
        UsageEntry.objects.filter(month=period.month)
        .values("project_id")
        .annotate(s=Sum("amount"))
        .values_list("project_id", "s")
    )
    for bill in Bill.objects.filter(period=period):
        if bill.total != bill.usage_amount + bill.adjustments_amount + bill.idle_share_amount:
            problems.append(f"bill {bill.pk}: total {bill.total} is not the sum of its parts")
        for group in ("resource", "job"):
            if bill.usage_amount and lines.get((bill.pk, group)) != bill.usage_amount:
                problems.append(
                    f"bill {bill.pk}: {group} lines {lines.get((bill.pk, group))} != usage {bill.usage_amount}"
                )
        if bill.idle_share_amount and lines.get((bill.pk, "idle")) != bill.idle_share_amount:
            problems.append(f"bill {bill.pk}: idle line != idle share")
        if bill.usage_amount != to_cents(used.get(bill.project_id, 0)):
            problems.append(
                f"bill {bill.pk}: usage {bill.usage_amount} != entries {used.get(bill.project_id)}"
            )
    spread = Bill.objects.filter(period=period).aggregate(s=Sum("idle_share_amount"))["s"] or 0
    if spread + period.platform_cost != period.idle_cost:
        problems.append(
            f"idle shares {spread} + platform {period.platform_cost} != idle cost {period.idle_cost}"
        )
    return problems


CARD_HOURS_SQL = """
WITH used AS (
    SELECT a.device_id, SUM(e.hours * a.compute_milli / 1000.0) AS card_hours, SUM(e.cu_hours) AS cu
    FROM billing_usageentry e JOIN scheduling_allocation a ON a.id = e.allocation_id
    WHERE e.month = %(month)s GROUP BY a.device_id
), cards AS (
    SELECT d.id, d.device_model_id, n.pool_id, d.health,
           EXTRACT(EPOCH FROM (%(end)s::timestamptz - GREATEST(%(start)s::timestamptz, d.created_at))) / 3600 AS physical
    FROM inventory_device d JOIN inventory_node n ON n.id = d.node_id WHERE d.created_at < %(end)s
)
SELECT c.id, c.device_model_id, c.pool_id, c.health = 'retired', c.physical,
       COALESCE(u.card_hours, 0), COALESCE(u.cu, 0)
FROM cards c LEFT JOIN used u ON u.device_id = c.id
"""


def check_cards(period) -> list[str]:
    """Per card: Σ slice card-hours + idle = in-service card-hours with idle ≥ 0 (a retired card's
    slices end with its node); Σ per (model, pool) of coefficient × in-service hours − used = the
    period's idle CU-hours."""
    from collections import defaultdict

    from django.db import connection

    from apps.billing import services
    from apps.catalog.selectors import coefficients_on

    start, end = services.month_bounds(period.month)
    with connection.cursor() as cursor:
        cursor.execute(CARD_HOURS_SQL, {"month": period.month, "start": start, "end": end})
        rows = cursor.fetchall()
    coefficients = coefficients_on({r[1] for r in rows}, period.month)
    problems, negative = [], 0
    capacity, used = defaultdict(Decimal), defaultdict(Decimal)
    for _pk, model_id, pool_id, retired, physical, card_hours, cu in rows:
        idle = Decimal(physical) - Decimal(card_hours)
        negative += idle < Decimal("-0.0001") and not retired
        if not retired:
            capacity[(model_id, pool_id)] += coefficients[model_id] * Decimal(physical)
        used[(model_id, pool_id)] += cu
    if negative:
        problems.append(f"{negative} cards hold more card-hours than they have")
    idle_cu = sum((max(Decimal(0), capacity[g] - used[g]) for g in capacity), Decimal(0))
    if abs(idle_cu - period.idle_cu_hours) > Decimal("0.001"):
        problems.append(f"idle CU-hours {period.idle_cu_hours} != capacity − use {idle_cu:.6f}")
    return problems


def measure(scale: float) -> dict:
    """Set the fleet up at ``scale`` of every size, then meter, close and re-meter the month."""
    from django.conf import settings

    from apps.billing import services

    figures = setup(scale)
    settings.SUANCHI["BILLING_USAGE_BASIS"] = "max"
    start, end = services.month_bounds(MONTH)
    t0 = time.perf_counter()
    metered = services.metering_run(start=start, end=end, actor="bench")
    figures["meter_s"] = time.perf_counter() - t0
    figures["entries"] = metered.created
    figures["slices"] = metered.slices
    marks: list[float] = []
    t0 = time.perf_counter()
    period = services.month_close(
        month=MONTH,
        actor="bench",
        idle_policy="spread",
        progress=lambda _p: marks.append(time.perf_counter()),
    )
    figures["close_s"] = time.perf_counter() - t0
    figures["close_meter_s"] = (marks[0] - t0) if marks else 0.0  # re-meter, usage and idle sums
    figures["close_bills_s"] = (marks[-2] - marks[0]) if len(marks) > 2 else 0.0
    figures["close_final_s"] = (marks[-1] - marks[-2]) if len(marks) > 1 else 0.0
    count, amount = _ledger_figures(MONTH)
    t0 = time.perf_counter()
    again = services.metering_run(start=start, end=end, actor="bench")
    figures["remeter_s"] = time.perf_counter() - t0
    count2, amount2 = _ledger_figures(MONTH)
    problems = check_bills(period) + check_cards(period)
    if again.created or (count, amount) != (count2, amount2):
        problems.append(
            f"re-metering changed the ledger: {again.created} new, {count}→{count2}, {amount}→{amount2}"
        )
    figures.update(
        month_entries=count,
        bills=period.bills.count(),
        state=period.state,
        idle_cost=period.idle_cost,
        billed=sum(b.total for b in period.bills.all()),
        problems=problems,
    )
    return figures


def report(label: str, f: dict) -> None:
    total = f["meter_s"] + f["close_s"]
    print(
        f"[{label}] {f['nodes']} nodes, {f['cards']} cards, {f['projects']} projects, "
        f"{f['allocations']} allocations, {f['rollups']} rollups; setup {f['setup_s']:.1f} s"
    )
    print(
        f"  metering            {f['meter_s']:8.2f} s  {f['entries'] / f['meter_s']:10.0f} entries/s  ({f['entries']} entries)"
    )
    print(
        f"  month close         {f['close_s']:8.2f} s  {f['month_entries'] / f['close_s']:10.0f} entries/s  "
        f"(re-meter+sums {f['close_meter_s']:.2f} s, {f['bills']} bills {f['close_bills_s']:.2f} s, "
        f"finalize {f['close_final_s']:.2f} s; {f['state']}, idle cost {f['idle_cost']}, billed {f['billed']})"
    )
    print(f"  re-metering         {f['remeter_s']:8.2f} s  (nothing new)")
    print(f"  metered and closed  {total:8.2f} s  {f['month_entries'] / total:10.0f} entries/s")
    print(f"  bills add up: {'yes' if not f['problems'] else 'NO'}")
    for problem in f["problems"][:10]:
        print(f"    {problem}")


def main() -> None:
    # Sizes come from BENCH_* (above); --help prints them and runs nothing.
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    ensure_database()
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results = []
    if 0 < SMALL_SHARE < 1:
        results.append((f"{SMALL_SHARE:g}×", measure(SMALL_SHARE)))
        report(*results[-1])
    results.append(("full", measure(1.0)))
    report(*results[-1])
    if len(results) == 2:
        (_l, small), (_l2, full) = results
        rate = lambda f: f["month_entries"] / (f["meter_s"] + f["close_s"])  # noqa: E731
        print(
            f"scaling: {full['allocations'] / small['allocations']:.1f}× the allocations, "
            f"{(full['meter_s'] + full['close_s']) / (small['meter_s'] + small['close_s']):.1f}× the time; "
            f"entries/s full / small {rate(full) / rate(small):.2f}"
        )


if __name__ == "__main__":
    main()
