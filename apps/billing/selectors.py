"""Billing reads, scoped by membership: members see their projects' bills and usage; staff see all."""

from __future__ import annotations

from collections import defaultdict
from datetime import date
from decimal import Decimal

from django.db.models import Count, F, QuerySet

from apps.accounts.models import Project
from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.billing.models import (
    Adjustment,
    Bill,
    BillingPeriod,
    JobCostSummary,
    JobCostTotal,
    ProjectCostSummary,
    RateCard,
    UsageEntry,
)
from apps.billing.pricing import to_cents
from apps.jobs.models import Allocation, Job


def _scoped(qs: QuerySet, user) -> QuerySet:
    if is_platform_staff(user):
        return qs
    return qs.filter(project_id__in=user_project_ids(user))


def bill_list(*, user) -> QuerySet[Bill]:
    return _scoped(Bill.objects.select_related("project", "project__department", "period"), user)


def bill_detail(*, user, pk: int) -> Bill:
    return bill_list(user=user).prefetch_related("lines").get(pk=pk)


def bill_names(bill: Bill) -> dict[str, str]:
    """The project and department names a bill prints: the snapshot taken at finalize for a finalized
    bill (renames never change it), the live names for a draft (fetch with ``bill_list``'s
    select_related)."""
    if bill.state == Bill.State.FINALIZED and bill.project_slug:
        return {
            "project_name": bill.project_name,
            "project_slug": bill.project_slug,
            "department_name": bill.department_name,
        }
    project = bill.project
    return {
        "project_name": project.name,
        "project_slug": project.slug,
        "department_name": project.department.name,
    }


def usage_entry_list(*, user) -> QuerySet[UsageEntry]:
    return _scoped(
        UsageEntry.objects.select_related("project", "job", "device_model", "template", "pool", "rate_card"),
        user,
    )


def entries_of_job(entries: QuerySet[UsageEntry], job_id: int) -> QuerySet[UsageEntry]:
    """``entries`` of one job. The ledger keeps no index on its job (billing 0013): the job's allocations
    lead its (allocation, slice_start) key, and an entry's job is its allocation's (a copied key), so
    these are exactly the rows ``job_id=`` names."""
    return entries.filter(allocation_id__in=Allocation.objects.filter(job_id=job_id).values("pk"))


def adjustment_list(*, user) -> QuerySet[Adjustment]:
    return _scoped(Adjustment.objects.select_related("project", "corrects_bill"), user)


def rate_card_list() -> QuerySet[RateCard]:
    return RateCard.objects.select_related(
        "pool", "pool__cluster", "device_model", "template"
    ).prefetch_related("discounts__project")


def period_list() -> QuerySet[BillingPeriod]:
    # Meta.ordering does not apply to an aggregated query: order explicitly (stable pages).
    # close_run: the month's progress (BillingPeriod.progress_*) without a query per period.
    return (
        BillingPeriod.objects.select_related("close_run")
        .annotate(bill_count=Count("bills"))
        .order_by("-month")
    )


def _job_costs(model, *, user, month: date | None = None, project_ids: set[int] | None = None) -> QuerySet:
    """The ledger's sums the user may see: per (job, billing month, project) (``JobCostSummary``), per
    (job, project) over every month (``JobCostTotal``) or per (billing month, project)
    (``ProjectCostSummary``), kept equal to the entries by the ledger's triggers: a row per job and
    month, or per project and month, instead of one per allocation-hour."""
    rows = _scoped(model.objects.all(), user)
    if month is not None:
        rows = rows.filter(month=month)
    if project_ids is not None:
        rows = rows.filter(project_id__in=project_ids)
    return rows.order_by()


def cost_by_month(*, user, project_ids: set[int] | None = None) -> list[dict]:
    """Per month and project: usage amount (ledger, open months included) and billed total."""
    rows = (
        _job_costs(ProjectCostSummary, user=user, project_ids=project_ids)
        .values("month", "project_id", "project__name", "amount", "cu_hours")
        .order_by("month", "project__name")
    )
    return [
        {
            "month": row["month"],
            "project_id": row["project_id"],
            "project": row["project__name"],
            "amount": to_cents(row["amount"]),
            "cu_hours": row["cu_hours"].quantize(Decimal("0.01")),
        }
        for row in rows
    ]


def cost_by_job_rows(*, user, month: date | None = None, project_ids: set[int] | None = None) -> QuerySet:
    """The per-job sums as a query, dearest first (a page slices it: a month has a row per job that
    ran); ``slices`` counts the job's entries. Read from the per-job summary in the page's order (its
    index), not grouped from the ledger."""
    return (
        _job_costs(
            JobCostTotal if month is None else JobCostSummary, user=user, month=month, project_ids=project_ids
        )
        .values("job_id", "project_id", "amount", "cu_hours", slices=F("entries"))
        .order_by("-amount", "job_id")
    )


def cost_by_job_page(
    *, user, month: date | None = None, number: int = 1, per_page: int = 50
) -> tuple[list[dict], int]:
    """Page ``number`` of ``cost_by_job_rows`` and the number of rows of all pages: two reads of the
    summary (the page from its index in the page's order, the count); the page used to aggregate the
    period's ledger (issue 20, issue 31 §3). A page past the end comes back empty with its count."""
    qs = cost_by_job_rows(user=user, month=month)
    offset = (number - 1) * per_page
    return list(qs[offset : offset + per_page]), qs.count()


def cost_by_job(
    *, user, month: date | None = None, project_ids: set[int] | None = None, rows=None
) -> list[dict]:
    """Cost per job: every job of the period, or the given slice of ``cost_by_job_rows``."""
    if rows is None:
        rows = cost_by_job_rows(user=user, month=month, project_ids=project_ids)
    rows = list(rows)
    jobs = dict(Job.objects.filter(pk__in={r["job_id"] for r in rows}).values_list("pk", "name"))
    projects = dict(Project.objects.filter(pk__in={r["project_id"] for r in rows}).values_list("pk", "name"))
    return [
        {
            "job_id": r["job_id"],
            "job": jobs.get(r["job_id"], ""),
            "project": projects.get(r["project_id"], ""),
            "project_id": r["project_id"],
            "amount": to_cents(r["amount"]),
            "cu_hours": r["cu_hours"].quantize(Decimal("0.01")),
            "slices": r["slices"],
        }
        for r in rows
    ]


def months_by_project(rows: list[dict]) -> dict[str, dict[date, Decimal]]:
    out: dict[str, dict[date, Decimal]] = defaultdict(dict)
    for row in rows:
        out[row["project"]][row["month"]] = row["amount"]
    return out
