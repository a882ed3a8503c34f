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
    Count,
    DurationField,
    ExpressionWrapper,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least
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
    exponent is floored at -700, where exp is below 1e-304.

    The allocations are first summed per project, start and release: the integral of each group is
    its CU × the same factor, and the allocations of a scheduling cycle share their start (the
    cycle's time), so the exponentials are taken per group, not per card (issue 31)."""
    try:
        grouped, params = (
            allocations.order_by()
            .values("project_id", "started_at", "released_at")
            .annotate(cu=Sum("compute_units"))
            .query.sql_with_params()
        )
    except EmptyResultSet:  # no project asked for
        return {}

    def age(column: str) -> str:  # hours before ``now`` (a parameter), at least 0
        return f"GREATEST(EXTRACT(EPOCH FROM (%s - {column}))::float8 / 3600.0, 0.0)"

    end_age, start_age = age("COALESCE(g.released_at, %s)"), age("g.started_at")
    if k == 0:
        term = f"g.cu::float8 * ({start_age} - {end_age})"
    else:
        term = f"g.cu::float8 * (EXP(GREATEST({-k!r} * {end_age}, -700.0)) - EXP(GREATEST({-k!r} * {start_age}, -700.0))) / {k!r}"
    # ``grouped`` is Django's own SQL for the queryset (its values are parameters); ``k`` a float.
    sql = f"SELECT g.project_id, SUM({term}) FROM ({grouped}) g GROUP BY g.project_id"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, (*[now] * term.count("%s"), *params))
        return {project_id: usage or 0.0 for project_id, usage in cursor.fetchall()}


def fair_shares(project_ids, *, now: dt.datetime | None = None) -> dict[int, float]:
    """Decayed usage relative to each project's guarantee and over-quota weight (lower goes first)."""
    return fair_shares_and_usage(project_ids, now=now)[0]


def fair_shares_and_usage(
    project_ids, *, now: dt.datetime | None = None
) -> tuple[dict[int, float], dict[int, float]]:
    """``fair_shares`` and the ``decayed_usage`` they are computed from (read once: the queue board
    shows both)."""
    ids = set(project_ids)
    guarantee: dict[int, float] = defaultdict(float)
    weight: dict[int, float] = {}
    for project_id, g, w in Quota.objects.filter(project_id__in=ids).values_list(
        "project_id", "guaranteed_cu", "over_quota_weight"
    ):
        guarantee[project_id] += float(g)
        weight[project_id] = max(weight.get(project_id, 0.0), float(w))
    usage = decayed_usage(ids, now=now)
    shares = {
        pk: admission.fair_share(usage.get(pk, 0.0), guarantee.get(pk, 0.0), weight.get(pk, 1.0))
        for pk in ids
    }
    return shares, usage


def fair_share_order(jobs: list[Job], *, now: dt.datetime | None = None) -> list[Job]:
    """Priority (high first), then fair share (low first), then age, then id."""
    shares = fair_shares({j.project_id for j in jobs}, now=now)
    return sorted(
        jobs,
        key=lambda j: admission.queue_key(
            j.priority, shares.get(j.project_id, 0.0), j.created_at.timestamp(), j.pk
        ),
    )


def queue_positions(
    job_ids, *, among: QuerySet[Job] | None = None, shares: dict[int, float] | None = None
) -> dict[int, int]:
    """1-based positions of the given queued jobs in the scheduling order (``fair_share_order``: priority,
    then fair share when quotas are configured, then age, then id) among the queued jobs, or among the
    queued jobs of ``among`` (e.g. the ones a reader can see). ``shares``: every project's fair share
    when the caller has just read them (the board); read here unless it names every project.

    Counted, not ranked (issue 31): a job's position is 1 + the queued jobs before it, and those are
    (a) the jobs of a higher priority, (b) those of its priority in a project of a lower fair share,
    (c) those of its priority in a project of the same share that are older (then of a lower id).
    (a) and (b) come from one count per project and priority of only those rows; (c) from index
    ranges of ``jobs_job_queued_rank_idx`` between the wanted jobs in queue order, each range counted
    once, so a page of 50 reads the queue's index at most about once and sorts nothing (the window
    over the whole queue with the shares as a CASE took 580–730 ms at 100,000 queued jobs)."""
    wanted = sorted(set(job_ids))
    if not wanted:
        return {}
    queued = (Job.objects.all() if among is None else among).filter(state__in=QUEUED_STATES).order_by()
    mine = list(queued.filter(pk__in=wanted).values_list("pk", "project_id", "priority", "created_at"))
    if not mine:  # none of them queued (or visible); ``among`` .none() runs no query
        return {}
    known = _queue_shares(shares)  # {} when no quota is configured: every share is 0.0

    def share(project_id: int) -> float:
        return known.get(project_id, 0.0)

    # (a) and (b): every row of a priority above the lowest wanted; at the lowest, those of projects
    # of a share below the highest wanted (the exact conditions per job are applied below).
    lowest = min(priority for _pk, _p, priority, _c in mine)
    top = max(share(project_id) for _pk, project_id, _priority, _c in mine)
    lower = [p for p, f in known.items() if f < top]
    before = Q(priority__gt=lowest)
    if lower:  # the index range then starts at the lowest priority (all of it read, filtered)
        before = Q(priority__gte=lowest) & (before | Q(priority=lowest, project_id__in=lower))
    counts = list(queued.filter(before).values_list("project_id", "priority").annotate(n=Count("pk")))
    # (c): the wanted jobs by (priority, share); in each, the ranges between consecutive jobs, among
    # the projects of that share (all of them when every project has it, or no quota is configured).
    tied: dict[tuple[int, float], list[tuple[dt.datetime, int]]] = defaultdict(list)
    for pk, project_id, priority, created in mine:
        tied[(priority, share(project_id))].append((created, pk))
    older = {}
    for (priority, s), jobs in tied.items():
        scope = queued.filter(priority=priority)
        if any(f != s for f in known.values()):
            scope = scope.filter(project_id__in=[p for p, f in known.items() if f == s])
        older.update(_older_counts(scope, sorted(jobs)))
    positions = {}
    for pk, project_id, priority, _created in mine:
        mine_share = share(project_id)
        ahead = sum(
            n
            for p, other_priority, n in counts
            if other_priority > priority or (other_priority == priority and share(p) < mine_share)
        )
        positions[pk] = ahead + older[pk] + 1
    return positions


def _queue_shares(shares: dict[int, float] | None) -> dict[int, float]:
    """The fair shares that order the queue: none when no quota is configured (the order is priority,
    age, id), else ``shares`` when it names every project (read at one instant: shares of two
    instants are never mixed, a tie would not be one), else ``fair_shares`` of every project now."""
    if not quotas_configured():
        return {}
    everyone = set(Project.objects.values_list("pk", flat=True))
    if shares is not None and everyone <= set(shares):
        return shares
    return fair_shares(everyone)


def _older_counts(scope: QuerySet[Job], jobs: list[tuple[dt.datetime, int]]) -> dict[int, int]:
    """For each (created_at, id) of ``jobs`` (sorted), the rows of ``scope`` strictly before it in
    (created_at, id) order: the ranges between consecutive jobs are counted in one statement (one
    index range each: PostgreSQL takes the row comparisons as the bounds of an index scan) and summed."""
    try:
        inner, params = scope.values("created_at", "id").query.sql_with_params()
    except EmptyResultSet:  # no project of that share: nothing before them
        return dict.fromkeys((pk for _created, pk in jobs), 0)
    parts, values = [], []
    low = None
    for i, (created, pk) in enumerate(jobs):
        since = "" if low is None else " AND (q.created_at, q.id) >= (%s, %s)"
        # ``inner`` is Django's SQL for ``scope`` (its values are parameters); ``i`` an int.
        parts.append(f"SELECT {i}, COUNT(*) FROM ({inner}) q WHERE (q.created_at, q.id) < (%s, %s){since}")  # noqa: S608
        bound = (connection.ops.adapt_datetimefield_value(created), pk)
        values += [*params, *bound, *(low or ())]
        low = bound
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), values)
        between = dict(cursor.fetchall())
    out, total = {}, 0
    for i, (_created, pk) in enumerate(jobs):
        total += between[i]
        out[pk] = total
    return out


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
    """(used, borrowed) CU at ``start + i × step`` for i < count, summed by PostgreSQL in one pass over
    the allocations: an allocation is held at step i from the first step at or after its start,
    ceil((started_at − start) / step), to the first step at or after its release (exclusive); those
    two step numbers are grouped with the CU that comes and goes there, and the running total is
    summed here (a few rows back, and no join of every step to every allocation, which cost
    steps × allocations comparisons: 121 × 5,000 for a month of one project at issue 31's scale)."""
    inner, params = (
        allocations.order_by()
        .values("started_at", "released_at", "compute_units", "borrowed")
        .query.sql_with_params()
    )
    seconds = Decimal(str(step.total_seconds()))
    # ``inner`` is Django's own SQL for the queryset (its values are parameters). EXTRACT of an
    # interval is exact (numeric), so a start or release right on a step falls on that step.
    at = "CEIL(EXTRACT(EPOCH FROM (a.{} - %s::timestamptz)) / %s)"
    cu = "SUM(a.compute_units), COALESCE(SUM(a.compute_units) FILTER (WHERE a.borrowed), 0)"
    sql = (
        f"SELECT 1, {at.format('started_at')}, {cu} FROM ({inner}) a GROUP BY 2 UNION ALL "  # noqa: S608
        f"SELECT -1, {at.format('released_at')}, {cu} FROM ({inner}) a WHERE a.released_at IS NOT NULL GROUP BY 2"
    )
    delta = [[Decimal(0), Decimal(0)] for _ in range(count + 1)]
    with connection.cursor() as cursor:
        cursor.execute(sql, (start, seconds, *params, start, seconds, *params))
        for sign, i, used, borrowed in cursor.fetchall():
            i = min(max(int(i), 0), count)  # started before the first step; released after the last
            delta[i][0] += sign * used
            delta[i][1] += sign * borrowed
    totals, used, borrowed = [], Decimal(0), Decimal(0)
    for i in range(count):
        used += delta[i][0]
        borrowed += delta[i][1]
        totals.append((used, borrowed))
    return totals


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
