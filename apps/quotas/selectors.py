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

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import (
    Case,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Least, RowNumber
from django.utils import timezone

from apps.accounts.models import Project
from apps.accounts.selectors import is_platform_staff, project_list
from apps.core.conf import suanchi_setting
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
    return float(suanchi_setting("FAIR_SHARE_HALF_LIFE_HOURS", DEFAULT_HALF_LIFE_HOURS))


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
    allocations = Allocation.objects.filter(project_id__in=list(project_ids)).filter(
        Q(released_at__isnull=True) | Q(released_at__gte=horizon)
    )
    k = math.log(2) / h if h > 0 else 0.0
    if connection.vendor == "postgresql":
        return _decayed_usage_sql(allocations, now=now, k=k)
    rows = allocations.values_list("project_id", "compute_units", "started_at", "released_at")
    usage: dict[int, float] = defaultdict(float)
    for project_id, cu, started, released in rows:
        end_age = max((now - (released or now)).total_seconds() / 3600, 0.0)
        start_age = max((now - started).total_seconds() / 3600, 0.0)
        if k == 0:
            usage[project_id] += float(cu) * (start_age - end_age)
        else:  # ∫ 2^(-age/h) d(age) from end_age to start_age
            usage[project_id] += float(cu) * (math.exp(-k * end_age) - math.exp(-k * start_age)) / k
    return dict(usage)


def _decayed_usage_sql(allocations: QuerySet, *, now: dt.datetime, k: float) -> dict[int, float]:
    """``decayed_usage`` summed by PostgreSQL, one row per project (the same integral, in float8):
    the scheduler and the pages no longer read every running allocation for it (issue 20).
    ``exp`` of a very negative number underflows to an error in PostgreSQL (Python gives 0.0): the
    exponent is floored at -700, where exp is below 1e-304."""

    def age_hours(field):  # hours before ``now``, at least 0
        return Func(
            Value(now),
            field,
            template="GREATEST(EXTRACT(EPOCH FROM (%(expressions)s))::float8 / 3600.0, 0.0)",
            arg_joiner=" - ",
            output_field=FloatField(),
        )

    def decay(age):
        return Func(
            age, template=f"EXP(GREATEST(-{k!r} * %(expressions)s, -700.0))", output_field=FloatField()
        )

    cu = Cast("compute_units", FloatField())
    end_age, start_age = age_hours(Coalesce("released_at", Value(now))), age_hours(F("started_at"))
    term = cu * (start_age - end_age) if k == 0 else cu * (decay(end_age) - decay(start_age)) / Value(k)
    rows = allocations.order_by().values("project_id").annotate(usage=Sum(term, output_field=FloatField()))
    return {row["project_id"]: row["usage"] or 0.0 for row in rows}


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


def queue_positions(job_ids, *, among: QuerySet[Job] | None = None) -> dict[int, int]:
    """1-based positions of the given queued jobs in the scheduling order (``fair_share_order``: priority,
    then fair share when quotas are configured, then age, then id) among the queued jobs, or among the
    queued jobs of ``among`` (e.g. the ones a reader can see).

    Ranked in SQL (``ROW_NUMBER() OVER (ORDER BY …)``, the projects' fair shares as a CASE) and only the
    wanted rows come back: a queue of 20,000 jobs is not loaded and sorted in Python for a page of 50
    (issue 20). One job (the board, a job's page) is counted instead: 1 + the queued jobs before it,
    which spares sorting the whole queue (issue 31)."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return {}
    queued = (Job.objects.all() if among is None else among).filter(state__in=QUEUED_STATES).order_by()
    share = None
    if quotas_configured():
        # Every project's share (a small table) rather than a DISTINCT over the queue; a project
        # without recent usage has share 0.0, the CASE's default.
        shares = fair_shares(Project.objects.values_list("pk", flat=True))
        share = Case(
            *(When(project_id=pk, then=Value(f)) for pk, f in sorted(shares.items()) if f),
            default=Value(0.0),
            output_field=FloatField(),
        )
    if len(wanted) == 1:
        return _position_by_count(queued, wanted[0], share)
    order = [F("priority").desc(), *([share.asc()] if share is not None else [])]
    order += [F("created_at").asc(), F("pk").asc()]
    ranked = queued.annotate(position=Window(RowNumber(), order_by=order)).values_list("pk", "position")
    try:
        sql, params = ranked.query.sql_with_params()
    except EmptyResultSet:  # ``among`` is .none(): nothing queued the reader can see
        return {}
    marks = ", ".join(["%s"] * len(wanted))
    with connection.cursor() as cursor:
        # Filtered outside the window: a WHERE on the annotated query would rank the wanted rows only.
        cursor.execute(f"SELECT * FROM ({sql}) ranked WHERE ranked.pk IN ({marks})", (*params, *wanted))  # noqa: S608
        return {pk: position for pk, position in cursor.fetchall()}


def _position_by_count(queued: QuerySet[Job], pk: int, share) -> dict[int, int]:
    """``queue_positions`` of one job: 1 + the jobs of ``queued`` strictly before it in the same order
    (priority desc, ``share`` asc when given, created_at, id), or {} when it is not among them."""
    if share is not None:
        queued = queued.annotate(share=share)
    fields = ("priority", "created_at", *(("share",) if share is not None else ()))
    mine = queued.filter(pk=pk).values(*fields).first()
    if mine is None:
        return {}
    ahead = Q(created_at=mine["created_at"], pk__lt=pk) | Q(created_at__lt=mine["created_at"])
    if share is not None:
        ahead = Q(share__lt=mine["share"]) | Q(share=mine["share"]) & ahead
    before = Q(priority__gt=mine["priority"]) | Q(priority=mine["priority"]) & ahead
    return {pk: queued.filter(before).count() + 1}


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
    ctx = quota_context(now=now, per_job=False)
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
    allocations = Allocation.objects.filter(project=project, started_at__lt=end).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=start)
    )
    steps = []
    t = start
    while t <= end:
        steps.append(t)
        t += step
    if steps and connection.vendor == "postgresql":
        totals = _usage_at_steps_sql(allocations, start=start, step=step, count=len(steps))
        return [
            {"at": at, "guaranteed": guarantee, "used": totals[i][0], "borrowed": totals[i][1]}
            for i, at in enumerate(steps)
        ]
    # One conditional sum per step, in SQL: one row back, not one per allocation (issue 20).
    sums: dict[str, Any] = {}
    for i, at in enumerate(steps):
        held = Q(started_at__lte=at) & (Q(released_at__isnull=True) | Q(released_at__gt=at))
        sums[f"u{i}"] = Sum("compute_units", filter=held, default=Decimal(0))
        sums[f"b{i}"] = Sum("compute_units", filter=held & Q(borrowed=True), default=Decimal(0))
    totals = allocations.order_by().aggregate(**sums) if steps else {}
    return [
        {"at": at, "guaranteed": guarantee, "used": totals[f"u{i}"], "borrowed": totals[f"b{i}"]}
        for i, at in enumerate(steps)
    ]


def _usage_at_steps_sql(allocations: QuerySet, *, start: dt.datetime, step: dt.timedelta, count: int) -> list:
    """(used, borrowed) CU at ``start + i × step`` for i < count, summed by PostgreSQL over the steps
    (``generate_series``) joined to the allocations: ``count`` rows back, however many allocations."""
    inner, params = (
        allocations.order_by()
        .values("started_at", "released_at", "compute_units", "borrowed")
        .query.sql_with_params()
    )
    # ``inner`` is Django's own SQL for the queryset (its values are parameters); ``at`` is step i.
    at = "(%s::timestamptz + s.i * %s::interval)"
    head = "SELECT s.i, COALESCE(SUM(a.compute_units), 0), COALESCE(SUM(a.compute_units) FILTER (WHERE a.borrowed), 0)"
    join = f"ON a.started_at <= {at} AND (a.released_at IS NULL OR a.released_at > {at})"
    sql = f"{head} FROM generate_series(0, %s) AS s(i) LEFT JOIN ({inner}) a {join} GROUP BY s.i ORDER BY s.i"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, (count - 1, *params, start, step, start, step))
        rows = cursor.fetchall()
    return [(used, borrowed) for _i, used, borrowed in rows]


def guarantee_share_used(*, project: Project, start: dt.datetime, end: dt.datetime) -> Decimal | None:
    """Share of the guarantee actually used over [start, end): guaranteed CU-hours used ÷ guaranteed
    CU-hours available ("used 60 % of quota this month"). None without a guarantee."""
    from apps.jobs.models import Allocation

    guarantee = sum((q.guaranteed_cu for q in Quota.objects.filter(project=project)), Decimal(0))
    hours = Decimal((end - start).total_seconds()) / Decimal(3600)
    if not guarantee or hours <= 0:
        return None
    # Σ CU × overlap, the overlaps summed in SQL per CU value (a few rows, not one per allocation).
    overlap = ExpressionWrapper(
        Least(Coalesce("released_at", Value(end)), Value(end)) - Greatest("started_at", Value(start)),
        output_field=DurationField(),
    )
    rows = (
        Allocation.objects.filter(project=project, borrowed=False, started_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .order_by()
        .annotate(overlap=overlap)
        .filter(overlap__gt=dt.timedelta(0))
        .values("compute_units")
        .annotate(held=Sum("overlap"))
    )
    used = sum(
        (row["compute_units"] * Decimal(row["held"].total_seconds()) / Decimal(3600) for row in rows),
        Decimal(0),
    )
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
    zone = ZoneInfo(suanchi_setting("BILLING_TIME_ZONE", None) or settings.TIME_ZONE)
    start = dt.datetime(month.year, month.month, 1, tzinfo=zone)
    end = dt.datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=zone)
    total = Decimal(0)
    for guarantee, created in rows:
        begin = max(start, created)
        if begin < end:
            total += guarantee * Decimal((end - begin).total_seconds()) / Decimal(3600)
    return total.quantize(Decimal("0.0001"))
