"""The per-job cost summary (issue 31 §3) equals the ledger's sums per (job, billing month, project)
(``JobCostSummary``), per (job, project) (``JobCostTotal``) and per (month, project)
(``ProjectCostSummary``) after every metering run: a window at a time, re-metering (nothing counted
twice), months cut in parts, late data, both metering paths, a run that fails (nothing written), and
SQLite (the demo); and the job-cost and bills pages read the same rows and totals from it as from the
ledger."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Count, Sum

from apps.billing import selectors, services
from apps.billing.models import (
    BillingPeriod,
    JobCostSummary,
    JobCostTotal,
    ProjectCostSummary,
    UsageEntry,
)
from apps.billing.pricing import to_cents
from apps.billing.services import metering
from tests.fixtures.billing import local
from tests.fixtures.sqlite_demo import run_on_sqlite_demo

pytestmark = pytest.mark.django_db
AUG, SEP, OCT = date(2026, 8, 1), date(2026, 9, 1), date(2026, 10, 1)
NOW = local(2026, 10, 2, 12, 30)


def _ledger_sums(*keys: str) -> dict:
    rows = UsageEntry.objects.order_by().values(*keys)
    rows = rows.annotate(amount=Sum("amount"), cu_hours=Sum("cu_hours"), n=Count("pk"))
    return {tuple(r[k] for k in keys): (r["amount"], r["cu_hours"], r["n"]) for r in rows}


def _exact() -> dict:
    """The summary's rows, once checked against the ledger's sums (both tables)."""
    keys = ("job_id", "month", "project_id")
    summary = {
        row[:3]: row[3:] for row in JobCostSummary.objects.values_list(*keys, "amount", "cu_hours", "entries")
    }
    assert summary == _ledger_sums(*keys)
    totals = {
        row[:2]: row[2:]
        for row in JobCostTotal.objects.values_list("job_id", "project_id", "amount", "cu_hours", "entries")
    }
    assert totals == _ledger_sums("job_id", "project_id")
    months = {
        row[:2]: row[2:]
        for row in ProjectCostSummary.objects.values_list(
            "month", "project_id", "amount", "cu_hours", "entries"
        )
    }
    assert months == _ledger_sums("month", "project_id")
    return summary


@pytest.fixture
def fleet_month(make_user, make_project, devices, make_job, make_allocation):
    """Four jobs of two projects: one across August and September, partial hours, an open allocation
    into October, half a card; a price change mid-September."""
    services.rate_card_create(
        actor="t", name="default", price_per_cu_hour=Decimal("7.7777"), effective_from=date(2026, 1, 1),
        effective_to=date(2026, 9, 15),
    )  # fmt: skip
    services.rate_card_create(
        actor="t", name="later", price_per_cu_hour=Decimal("9.125"), effective_from=date(2026, 9, 16)
    )
    alice = make_user("alice")
    vision, other = make_project("vision", members=[alice]), make_project("other")
    a, b, c = make_job(vision, name="a"), make_job(other, name="b"), make_job(vision, name="c")
    make_allocation(a, devices[0], local(2026, 8, 31, 22, 30), local(2026, 9, 1, 1, 15))
    make_allocation(a, devices[1], local(2026, 9, 15, 22, 7, 13), local(2026, 9, 16, 2, 0, 1))
    make_allocation(b, devices[2], local(2026, 9, 29, 23, 59, 59), None)
    make_allocation(c, devices[3], local(2026, 9, 20, 10, 3), local(2026, 9, 20, 14), milli=500)
    make_allocation(make_job(other, name="d"), devices[4], local(2026, 9, 20, 9), local(2026, 9, 20, 12))
    return alice


def _meter(start, end):
    return services.metering_run(start=start, end=end, now=NOW)


@pytest.mark.parametrize("path", ["sql", "python"])
@pytest.mark.parametrize("august", ["open", "closed"])
def test_the_summary_is_the_ledgers_sums_after_every_run(fleet_month, monkeypatch, path, august):
    if path == "python":
        monkeypatch.setattr(metering, "_meter_in_sql", metering._meter_in_python)
    if august == "closed":  # August's slices are late data, booked into September
        BillingPeriod.objects.create(month=AUG, state=BillingPeriod.State.CLOSED)
    assert _meter(local(2026, 9, 20), local(2026, 9, 21)).created > 0  # part of September
    assert {k[1] for k in _exact()} == {SEP}
    assert _meter(local(2026, 8, 25), local(2026, 10, 2)).created > 0  # the rest, the 20th again
    sums = _exact()
    assert {k[1] for k in sums} == ({SEP, OCT} if august == "closed" else {AUG, SEP, OCT})
    assert _meter(local(2026, 8, 25), local(2026, 10, 2)).created == 0  # re-metering
    assert _exact() == sums
    assert sum(n for _a, _c, n in sums.values()) == UsageEntry.objects.count() > 0


def test_a_failed_run_writes_no_summary(fleet_month, monkeypatch):
    def broken(months):
        raise RuntimeError("worker killed")

    with monkeypatch.context() as patch:
        patch.setattr(metering, "_ensure_periods", broken)
        with pytest.raises(RuntimeError):
            _meter(local(2026, 8, 25), local(2026, 10, 2))
    assert not UsageEntry.objects.exists() and not JobCostSummary.objects.exists()
    assert not JobCostTotal.objects.exists() and not ProjectCostSummary.objects.exists()
    assert _meter(local(2026, 8, 25), local(2026, 10, 2)).created > 0
    assert _exact()


def test_truncating_the_ledger_empties_the_summary(fleet_month):
    _meter(local(2026, 8, 25), local(2026, 10, 2))
    assert JobCostSummary.objects.exists() and JobCostTotal.objects.exists()
    with connection.cursor() as cursor:  # the test's transaction still holds the deferred FK checks
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE; TRUNCATE billing_usageentry")
    assert not JobCostSummary.objects.exists() and not JobCostTotal.objects.exists()
    assert not ProjectCostSummary.objects.exists()


def _old_cost_by_job_rows(user, month=None):
    """The job-cost page's rows as they were read before the summary: grouped over the ledger."""
    entries = selectors.usage_entry_list(user=user)
    if month is not None:
        entries = entries.filter(month=month)
    return list(
        entries.order_by()
        .values("job_id", "project_id")
        .annotate(amount=Sum("amount"), cu_hours=Sum("cu_hours"), slices=Count("pk"))
        .order_by("-amount", "job_id")
    )


def _old_cost_by_month(user):
    rows = (
        selectors.usage_entry_list(user=user)
        .order_by()
        .values("month", "project_id", "project__name")
        .annotate(amount=Sum("amount"), cu_hours=Sum("cu_hours"))
        .order_by("month", "project__name")
    )
    return [
        (
            r["month"],
            r["project_id"],
            r["project__name"],
            to_cents(r["amount"]),
            r["cu_hours"].quantize(Decimal("0.01")),
        )
        for r in rows
    ]


def test_the_pages_read_what_the_ledger_sums_gave(fleet_month, staff_user):
    _meter(local(2026, 8, 25), local(2026, 10, 2))
    for user in (staff_user, fleet_month):
        for month in (None, AUG, SEP, OCT):
            old = _old_cost_by_job_rows(user, month)
            new = list(selectors.cost_by_job_rows(user=user, month=month))
            assert new == old and all(isinstance(r["slices"], int) for r in new)
            assert old or user is not staff_user
            assert selectors.cost_by_job(user=user, rows=new) == selectors.cost_by_job(user=user, rows=old)
            rows, total = selectors.cost_by_job_page(user=user, month=month, number=1, per_page=2)
            assert [r["job_id"] for r in rows] == [r["job_id"] for r in old[:2]] and total == len(old)
        new_months = [
            (r["month"], r["project_id"], r["project"], r["amount"], r["cu_hours"])
            for r in selectors.cost_by_month(user=user)
        ]
        assert new_months == _old_cost_by_month(user) and new_months
    member_jobs = {r["job_id"] for r in selectors.cost_by_job_rows(user=fleet_month)}
    assert member_jobs and member_jobs < {r["job_id"] for r in selectors.cost_by_job_rows(user=staff_user)}


SQLITE_SCRIPT = """
    import json, uuid
    from datetime import date, datetime
    from decimal import Decimal
    from zoneinfo import ZoneInfo
    from django.db.models import Count, Sum
    from apps.accounts.models import Department, Project
    from apps.billing import services
    from apps.billing.models import JobCostSummary, JobCostTotal, ProjectCostSummary, UsageEntry
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.jobs.models import Allocation, Job
    tz = ZoneInfo("Asia/Shanghai")
    services.rate_card_create(actor="t", name="d", price_per_cu_hour=Decimal("7.7777"), effective_from=date(2026, 1, 1))
    dept = Department.objects.create(name="d", slug="d")
    cluster = Cluster.objects.create(name="c", slug="c")
    node = Node.objects.create(cluster=cluster, pool=Pool.objects.create(cluster=cluster, name="p", slug="p"), name="n")
    spans = [((8, 31, 22, 30), (9, 1, 1, 15)), ((9, 15, 22, 7), (9, 16, 2, 0)), ((9, 30, 23, 0), (10, 1, 3, 0))]
    for i, (lo, hi) in enumerate(spans):
        project = Project.objects.create(department=dept, name=f"p{i}", slug=f"p{i}", namespace=f"p{i}")
        job = Job.objects.create(project=project, name=f"j{i}", image="x", state="running", request_kind="whole_cards", count=1)
        Allocation.objects.create(
            job=job, device=Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"GPU-{i}"), node=node,
            whole_card=True, memory_mib=1, compute_milli=1000, compute_units=Decimal(1), trace_id=uuid.uuid4(),
            started_at=datetime(2026, *lo, tzinfo=tz), released_at=datetime(2026, *hi, tzinfo=tz),
        )
    def q(value):
        return str(Decimal(value).quantize(Decimal("0.000001")))
    def sums(*keys):
        rows = UsageEntry.objects.order_by().values(*keys).annotate(a=Sum("amount"), c=Sum("cu_hours"), n=Count("pk"))
        return sorted([*(str(r[k]) for k in keys), q(r["a"]), q(r["c"]), r["n"]] for r in rows)
    def summary(model, *keys):
        rows = model.objects.values_list(*keys, "amount", "cu_hours", "entries")
        return sorted([*(str(v) for v in r[:-3]), q(r[-3]), q(r[-2]), r[-1]] for r in rows)
    now = datetime(2026, 10, 2, 12, 30, tzinfo=tz)
    out = []
    for lo, hi in (((9, 1), (9, 16)), ((8, 25), (10, 2)), ((8, 25), (10, 2))):
        services.metering_run(start=datetime(2026, *lo, tzinfo=tz), end=datetime(2026, *hi, tzinfo=tz), now=now)
        keys = ("job_id", "month", "project_id")
        out.append({
            "ledger": sums(*keys), "summary": summary(JobCostSummary, *keys),
            "ledger_totals": sums("job_id", "project_id"), "totals": summary(JobCostTotal, "job_id", "project_id"),
            "ledger_months": sums("month", "project_id"), "months": summary(ProjectCostSummary, "month", "project_id"),
        })
    print(json.dumps(out))
"""


def test_the_sqlite_demo_keeps_the_summary_too(tmp_path):
    runs = json.loads(run_on_sqlite_demo(SQLITE_SCRIPT, tmp_path).strip().splitlines()[-1])
    for run in runs:
        assert run["summary"] == run["ledger"] and run["totals"] == run["ledger_totals"]
        assert run["months"] == run["ledger_months"]
    assert runs[0]["ledger"] and len(runs[1]["ledger"]) > len(runs[0]["ledger"])
    assert runs[2] == runs[1]  # re-metering counts nothing twice
    assert {row[1] for row in runs[1]["ledger"]} == {"2026-08-01", "2026-09-01", "2026-10-01"}
