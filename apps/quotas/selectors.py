"""Quota reads: fair-share queue order, showback (guaranteed vs used vs borrowed), who borrows from
whom. The "why pending?" answer joins the decision traces too: it is a scheduling read
(``apps.scheduling.selectors.why_pending``)."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.accounts.models import Project
from apps.accounts.selectors import is_platform_staff, project_list
from apps.jobs.models import QUEUED_STATES, Job
from apps.quotas import admission
from apps.quotas.book import quota_context
from apps.quotas.models import Quota

DEFAULT_HALF_LIFE_HOURS = 168.0  # one week, as Slurm's PriorityDecayHalfLife default


def quotas_configured() -> bool:
    return Quota.objects.exists()


def quota_list(*, user) -> QuerySet[Quota]:
    """Staff see every quota; others the quotas of their projects and of those projects' departments."""
    qs = Quota.objects.select_related("project", "project__department", "department", "device_model", "pool")
    if is_platform_staff(user):
        return qs
    projects = project_list(user=user)
    return qs.filter(Q(project__in=projects) | Q(department__in=projects.values("department"))).distinct()


def half_life_hours() -> float:
    return float(settings.SUANCHI.get("FAIR_SHARE_HALF_LIFE_HOURS", DEFAULT_HALF_LIFE_HOURS))


# --------------------------------------------------------------------------------------------------
# fair share


def decayed_usage(
    project_ids, *, now: dt.datetime | None = None, half_life: float | None = None
) -> dict[int, float]:
    """CU-hours per project, each instant weighed by 2^(-age / half-life) (integrated exactly)."""
    from apps.jobs.models import Allocation

    now = now or timezone.now()
    h = half_life if half_life is not None else half_life_hours()
    horizon = now - dt.timedelta(hours=max(h, 1.0) * 10)
    rows = (
        Allocation.objects.filter(job__project_id__in=list(project_ids))
        .filter(Q(released_at__isnull=True) | Q(released_at__gte=horizon))
        .values_list("job__project_id", "compute_units", "started_at", "released_at")
    )
    usage: dict[int, float] = defaultdict(float)
    k = math.log(2) / h if h > 0 else 0.0
    for project_id, cu, started, released in rows:
        end_age = max((now - (released or now)).total_seconds() / 3600, 0.0)
        start_age = max((now - started).total_seconds() / 3600, 0.0)
        if k == 0:
            usage[project_id] += float(cu) * (start_age - end_age)
        else:  # ∫ 2^(-age/h) d(age) from end_age to start_age
            usage[project_id] += float(cu) * (math.exp(-k * end_age) - math.exp(-k * start_age)) / k
    return dict(usage)


def fair_shares(project_ids, *, now: dt.datetime | None = None) -> dict[int, float]:
    """Decayed usage relative to each project's guarantee and over-quota weight (lower goes first)."""
    ids = set(project_ids)
    guarantee: dict[int, float] = defaultdict(float)
    weight: dict[int, float] = {}
    for project_id, g, w in Quota.objects.filter(project_id__in=ids).values_list(
        "project_id", "guaranteed_cu", "over_quota_weight"
    ):
        guarantee[project_id] += float(g)
        weight[project_id] = max(weight.get(project_id, 0.0), float(w))
    usage = decayed_usage(ids, now=now)
    return {
        pk: admission.fair_share(usage.get(pk, 0.0), guarantee.get(pk, 0.0), weight.get(pk, 1.0))
        for pk in ids
    }


def fair_share_order(jobs: list[Job], *, now: dt.datetime | None = None) -> list[Job]:
    """Priority (high first), then fair share (low first), then age, then id."""
    shares = fair_shares({j.project_id for j in jobs}, now=now)
    return sorted(
        jobs,
        key=lambda j: admission.queue_key(
            j.priority, shares.get(j.project_id, 0.0), j.created_at.timestamp(), j.pk
        ),
    )


def queue_positions(job_ids) -> dict[int, int]:
    """1-based positions of the given queued jobs in the scheduling order."""
    wanted = set(job_ids)
    if not wanted:
        return {}
    queued = list(
        Job.objects.filter(state__in=QUEUED_STATES).only("id", "priority", "project_id", "created_at")
    )
    if quotas_configured():
        order = fair_share_order(queued)
    else:
        order = sorted(queued, key=lambda j: (-j.priority, j.created_at, j.pk))
    return {job.pk: i for i, job in enumerate(order, start=1) if job.pk in wanted}


# --------------------------------------------------------------------------------------------------
# showback


@dataclass
class QuotaUsage:
    quota: Quota
    guaranteed_used: Decimal
    borrowed: Decimal
    lendable: Decimal
    lending_open: bool

    @property
    def used(self) -> Decimal:
        return self.guaranteed_used + self.borrowed

    @property
    def share_of_guarantee(self) -> Decimal | None:
        if not self.quota.guaranteed_cu:
            return None
        return (self.guaranteed_used / self.quota.guaranteed_cu * 100).quantize(Decimal("0.1"))


def quota_usage(*, user, now: dt.datetime | None = None) -> tuple[list[QuotaUsage], list[admission.Flow]]:
    """Each visible project quota with what is in use now (guaranteed / borrowed), and the borrowing
    flows (who borrows from whom) of the classes the user's quotas are in."""
    ctx = quota_context(now=now)
    visible = list(quota_list(user=user).filter(project__isnull=False))
    rows = []
    classes = set()
    for q in visible:
        key = str(q.pk)
        row = ctx.book.rows.get(key)
        g, b = ctx.book.used(key)
        rows.append(
            QuotaUsage(
                quota=q,
                guaranteed_used=g,
                borrowed=b,
                lendable=row.lendable(g) if row else Decimal(0),
                lending_open=bool(row and row.lending_open),
            )
        )
        classes.add(q.class_key)
    names = {q.project.slug for q in visible}
    flows = []
    for cls in sorted(classes):
        for flow in ctx.book.pools(cls).flows:
            if is_platform_staff(user) or flow.borrower in names or flow.lender in names:
                flows.append(flow)
    return rows, flows


def usage_history(
    *, project: Project, start: dt.datetime, end: dt.datetime, step: dt.timedelta
) -> list[dict[str, Any]]:
    """Guaranteed vs used vs borrowed CU of one project at each step (from allocation intervals)."""
    from apps.jobs.models import Allocation

    guarantee = sum((q.guaranteed_cu for q in Quota.objects.filter(project=project)), Decimal(0))
    allocations = list(
        Allocation.objects.filter(job__project=project, started_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .values_list("started_at", "released_at", "compute_units", "borrowed")
    )
    points = []
    t = start
    while t <= end:
        used = borrowed = Decimal(0)
        for started, released, cu, is_borrowed in allocations:
            if started <= t and (released is None or released > t):
                used += cu
                if is_borrowed:
                    borrowed += cu
        points.append({"at": t, "guaranteed": guarantee, "used": used, "borrowed": borrowed})
        t += step
    return points


def guarantee_share_used(*, project: Project, start: dt.datetime, end: dt.datetime) -> Decimal | None:
    """Share of the guarantee actually used over [start, end): guaranteed CU-hours used ÷ guaranteed
    CU-hours available ("used 60 % of quota this month"). None without a guarantee."""
    from apps.jobs.models import Allocation

    guarantee = sum((q.guaranteed_cu for q in Quota.objects.filter(project=project)), Decimal(0))
    hours = Decimal((end - start).total_seconds()) / Decimal(3600)
    if not guarantee or hours <= 0:
        return None
    used = Decimal(0)
    for started, released, cu in (
        Allocation.objects.filter(job__project=project, borrowed=False, started_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .values_list("started_at", "released_at", "compute_units")
    ):
        a = max(started, start)
        b = min(released or end, end)
        if b > a:
            used += cu * Decimal((b - a).total_seconds()) / Decimal(3600)
    return (used / (guarantee * hours) * 100).quantize(Decimal("0.1"))


def guaranteed_cu_hours(*, project: Project, month: dt.date) -> Decimal | None:
    """Guaranteed compute-unit-hours of a project in a calendar month (platform time zone), for the
    bill's quota showback: each quota row's guarantee × the hours of the month it existed. None when
    the project has no quota. Billing's month close reads it (apps.billing.services)."""
    from zoneinfo import ZoneInfo

    from django.conf import settings

    rows = list(Quota.objects.filter(project=project).values_list("guaranteed_cu", "created_at"))
    if not rows:
        return None
    zone = ZoneInfo(settings.SUANCHI.get("BILLING_TIME_ZONE") or settings.TIME_ZONE)
    start = dt.datetime(month.year, month.month, 1, tzinfo=zone)
    end = dt.datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=zone)
    total = Decimal(0)
    for guarantee, created in rows:
        begin = max(start, created)
        if begin < end:
            total += guarantee * Decimal((end - begin).total_seconds()) / Decimal(3600)
    return total.quantize(Decimal("0.0001"))
