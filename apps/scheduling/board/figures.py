"""The queue board itself (``queue_board``): the figures below, per project and department, as the
reader may see them (``apps.scheduling.board``).

The figures, and where each comes from:

* **queued**: jobs in ``QUEUED_STATES``, counted, with their requested compute units
  (``Job.requested_cu``; a request without a CU value counts 0 CU).
* **running**: CU of the active allocations (``released_at`` null, releasing ones included: their
  cards are still held); **borrowed** is the part flagged ``borrowed`` (granted beyond the guarantee,
  preemptible).
* **guarantee**: the project's quota rows summed, as ``apps.quotas.selectors.fair_shares`` sums them.
* **lent**: the quota book's borrowing flows (``Book.pools(class).flows``) whose lender is the project:
  idle guarantee another project runs on now.
* **fair share**: the scheduler keeps no "share of the fleet" number; it orders the queue by priority,
  then by a fair-share *factor* (``fair_shares``: decayed CU-hours ÷ guarantee (at least 1 CU) ÷
  over-quota weight; lower first), then age. The board shows that factor, and as the share a project
  is entitled to, guarantee ÷ all projects' guarantees (the page's help text says so).
* **use**: running CU ÷ all running CU on the platform.
* **starved**: queued jobs the scheduler examined and could not place (a non-empty ``state_reason``),
  each in one category (``CATEGORIES``) parsed from that reason (``classify``).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.accounts.models import Project
from apps.accounts.selectors import is_platform_staff, project_list
from apps.core.formatting import format_number
from apps.core.stored_text import stored
from apps.jobs.models import ACTIVE_STATES, QUEUED_STATES, Allocation, Job, JobEvent
from apps.quotas import admission
from apps.quotas.book import class_capacity, quota_context
from apps.quotas.models import Quota
from apps.quotas.selectors import fair_shares_and_usage, half_life_hours, quotas_configured
from apps.scheduling.board.classify import (
    CATEGORIES,
    CATEGORY_HELP,
    CATEGORY_LABELS,
    Classified,
    classify,
    preemption_cause,
    redact,
)

ZERO = Decimal(0)
PREEMPTION_WINDOW = dt.timedelta(hours=24)
LIST_LIMIT = 25  # starved jobs listed per category (all are counted)
PREEMPTION_LIST_LIMIT = 50

# Shown in place of a project (or another department's unassigned guarantee) the reader may not see
# (stored texts: translated where they are shown).
ANOTHER_PROJECT = stored("another project")
ANOTHER_DEPARTMENT = stored("another department's unassigned guarantee")


@dataclass
class StarvedJob:
    pk: int
    name: str
    project: str
    reason: str  # the stored English text, redacted for the reader (shown through |localized)
    detail: str
    waiting_since: dt.datetime
    requested_cu: Decimal | None


@dataclass
class StarvedGroup:
    category: str
    count: int = 0
    cu: Decimal = ZERO
    jobs: list[StarvedJob] = field(default_factory=list)
    details: Counter = field(default_factory=Counter)

    @property
    def label(self):
        return CATEGORY_LABELS[self.category]

    @property
    def help(self):
        return CATEGORY_HELP[self.category]

    @property
    def top_detail(self) -> str:
        return self.details.most_common(1)[0][0] if self.details else ""


@dataclass
class Flow:
    other: str  # a project slug, "another project", a department's unassigned guarantee or the elastic pool
    amount: Decimal


@dataclass
class Figures:
    """What one project (or a department's visible projects, summed) holds and waits for."""

    queued_jobs: int = 0
    queued_cu: Decimal = ZERO
    running_jobs: int = 0
    running_cu: Decimal = ZERO
    borrowed_cu: Decimal = ZERO
    lent_cu: Decimal = ZERO
    guarantee: Decimal = ZERO
    starved: dict[str, int] = field(default_factory=dict)
    unexamined: int = 0
    preempted: int = 0
    fair_share_pct: Decimal | None = None
    use_pct: Decimal | None = None

    @property
    def within_cu(self) -> Decimal:
        return self.running_cu - self.borrowed_cu

    @property
    def idle_guarantee(self) -> Decimal:
        return max(self.guarantee - self.within_cu, ZERO)

    @property
    def starved_total(self) -> int:
        return sum(self.starved.values())

    def add(self, other: Figures) -> None:
        for name in (
            "queued_jobs",
            "queued_cu",
            "running_jobs",
            "running_cu",
            "borrowed_cu",
            "lent_cu",
            "guarantee",
            "unexamined",
            "preempted",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for category, n in other.starved.items():
            self.starved[category] = self.starved.get(category, 0) + n


@dataclass
class ProjectRow(Figures):
    project: Project | None = None
    has_quota: bool = False
    weight: Decimal = Decimal(1)
    decayed_usage: float = 0.0  # CU-hours, decayed (``decayed_usage``)
    factor: float | None = None  # the scheduler's fair-share factor (``fair_shares``)
    details: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))  # category → causes
    lent_to: list[Flow] = field(default_factory=list)
    borrowed_from: list[Flow] = field(default_factory=list)
    first_queued: Job | None = None

    @property
    def factor_label(self) -> str:
        return factor_text(self.factor)


@dataclass
class DepartmentRow(Figures):
    department: object = None
    projects: list[ProjectRow] = field(default_factory=list)
    department_guarantee: Decimal | None = None  # the department's own quota rows


@dataclass
class Preemption:
    at: dt.datetime
    job_pk: int
    job_name: str
    project: str
    cause: str
    message: str  # redacted stored text


@dataclass
class Board:
    staff: bool
    quotas_on: bool
    half_life_hours: float
    total_guarantee: Decimal
    total_running: Decimal
    capacity: Decimal | None
    rows: list[ProjectRow]
    departments: list[DepartmentRow]
    starved: list[StarvedGroup]
    preemptions: list[Preemption]
    now: dt.datetime
    totals: Figures = field(default_factory=Figures)
    queue_ranks: dict[int, tuple[int, int]] = field(default_factory=dict)  # see ``lower_factor_count``
    # The fair shares the board read (``fair_shares``: its projects and every one with waiting jobs
    # staff rank), for a queue position counted at once (``queue_positions(shares=…)``).
    shares: dict[int, float] = field(default_factory=dict)

    def row(self, slug: str) -> ProjectRow | None:
        return next((r for r in self.rows if r.project.slug == slug), None)

    def lower_factor_count(self, row: ProjectRow) -> tuple[int, int]:
        """(projects with waiting jobs whose factor is lower than ``row``'s, projects with waiting
        jobs): counted platform-wide (a number, no name)."""
        return self.queue_ranks.get(row.project.pk, (0, 0))


def _pct(part: Decimal, whole: Decimal) -> Decimal | None:
    if not whole:
        return None
    return (Decimal(part) / Decimal(whole) * 100).quantize(Decimal("0.1"))


def queue_board(*, user, department: str | None = None, now: dt.datetime | None = None) -> Board:
    """The board as ``user`` may see it (their projects; staff: all), optionally one department's."""
    now = now or timezone.now()
    staff = is_platform_staff(user)
    projects_qs = project_list(user=user).order_by("department__name", "slug")
    if department:
        projects_qs = projects_qs.filter(department__slug=department)
    projects = list(projects_qs)
    ids = [p.pk for p in projects]
    visible_slugs = set(project_list(user=user).values_list("slug", flat=True))

    # ---- platform totals (sums only) --------------------------------------------------------------
    total_guarantee = Quota.objects.filter(project__isnull=False).aggregate(
        s=Coalesce(Sum("guaranteed_cu"), ZERO)
    )["s"]

    rows = {p.pk: ProjectRow(project=p) for p in projects}
    total_running = _held(rows, ids)
    groups = _starved(rows, ids, staff=staff, visible=visible_slugs)
    quotas_on = quotas_configured()
    waiting = {pk for pk, row in rows.items() if row.queued_jobs}  # counted by ``_starved``
    heads = queue_heads(waiting)  # only projects with queued jobs: an idle one's LIMIT 1 reads the queue
    first = Job.objects.in_bulk(list(heads.values()))
    for project_id, pk in heads.items():
        rows[project_id].first_queued = first[pk]
    if quotas_on and staff and department:  # staff see every project in rows, but for a department filter
        waiting = set(
            Job.objects.filter(state__in=QUEUED_STATES)
            .order_by()
            .values_list("project_id", flat=True)
            .distinct()
        )
    book_capacity = _flows(rows, projects, now=now, staff=staff, visible=visible_slugs) if quotas_on else {}
    # The fleet's CU: the book's own figure when a quota row is of class "any" (the same sum, not
    # counted twice), else counted here.
    if "any" in book_capacity:
        capacity = book_capacity["any"]
    else:
        capacity = class_capacity({"any"}, on=timezone.localdate(now)).get("any")
    shares: dict[int, float] = {}
    ranks = _fair_share(
        rows,
        ids,
        waiting=waiting,
        now=now,
        quotas_on=quotas_on,
        staff=staff,
        total_guarantee=total_guarantee,
        total_running=total_running,
        shares=shares,
    )
    preemptions = _preemptions(rows, ids, now=now, staff=staff, visible=visible_slugs)
    departments, totals = _departments(
        rows, quotas_on=quotas_on, total_guarantee=total_guarantee, total_running=total_running
    )
    return Board(
        staff=staff,
        quotas_on=quotas_on,
        half_life_hours=half_life_hours(),
        total_guarantee=total_guarantee,
        total_running=total_running,
        capacity=capacity,
        rows=list(rows.values()),
        departments=departments,
        starved=[groups[c] for c in CATEGORIES],
        preemptions=preemptions,
        now=now,
        totals=totals,
        queue_ranks=ranks,
        shares=shares,
    )


def _held(rows: dict[int, ProjectRow], ids: list[int]) -> Decimal:
    """Per project: its guarantee (and weight), the CU it runs and borrows, its active jobs. Returns the
    CU all active allocations hold: the sum of every project's (one pass over them, not two)."""
    for pk, g, w in Quota.objects.filter(project_id__in=ids).values_list(
        "project_id", "guaranteed_cu", "over_quota_weight"
    ):
        row = rows[pk]  # weights as ``fair_shares`` reads them: the largest of the rows
        row.weight = max(row.weight, w) if row.has_quota else w
        row.has_quota = True
        row.guarantee += g
    total = ZERO
    for pk, running, borrowed in (
        Allocation.objects.filter(released_at__isnull=True)
        .order_by()
        .values_list("project_id")
        .annotate(
            cu=Coalesce(Sum("compute_units"), ZERO),
            b=Coalesce(Sum("compute_units", filter=Q(borrowed=True)), ZERO),
        )
    ):
        total += running
        if pk in rows:
            rows[pk].running_cu, rows[pk].borrowed_cu = running, borrowed
    for pk, n in (  # COUNT(*): from ``jobs_job_active_project_idx`` alone, which has no id
        Job.objects.filter(project_id__in=ids, state__in=ACTIVE_STATES)
        .order_by()
        .values_list("project_id")
        .annotate(n=Count("*"))
    ):
        rows[pk].running_jobs = n
    return total


def _starved(rows: dict[int, ProjectRow], ids: list[int], *, staff: bool, visible: set[str]) -> dict:
    """The queued jobs per project and category (the starved groups, with up to LIST_LIMIT jobs each)."""
    # Queued jobs, grouped by project and reason in SQL (a handful of distinct reasons, not one row
    # per job); each distinct reason is classified once.
    queued = Job.objects.filter(project_id__in=ids, state__in=QUEUED_STATES)
    groups = {c: StarvedGroup(c) for c in CATEGORIES}
    reasons_by_category: dict[str, set[str]] = defaultdict(set)
    classified: dict[str, Classified | None] = {}
    for pk, reason, n, cu in (
        queued.order_by()
        .values_list("project_id", "state_reason")
        .annotate(n=Count("pk"), cu=Coalesce(Sum("requested_cu"), ZERO))
    ):
        row = rows[pk]
        row.queued_jobs += n
        row.queued_cu += cu
        if reason not in classified:
            classified[reason] = classify(reason)
        result = classified[reason]
        if result is None:
            row.unexamined += n
            continue
        detail = _shown(result.detail, staff, visible)
        row.starved[result.category] = row.starved.get(result.category, 0) + n
        row.details[result.category][detail] += n
        group = groups[result.category]
        group.count += n
        group.cu += cu
        group.details[detail] += n
        reasons_by_category[result.category].add(reason)
    for category, reasons in reasons_by_category.items():
        for job in (
            queued.filter(state_reason__in=reasons)
            .select_related("project")
            .order_by("-priority", "created_at", "pk")[:LIST_LIMIT]
        ):
            result = classified[job.state_reason]
            groups[category].jobs.append(
                StarvedJob(
                    pk=job.pk,
                    name=job.name,
                    project=job.project.slug,
                    reason=_shown(job.state_reason, staff, visible),
                    detail=_shown(result.detail, staff, visible),
                    waiting_since=job.state_changed_at or job.created_at,
                    requested_cu=job.requested_cu,
                )
            )
    return groups


def queue_heads(project_ids) -> dict[int, int]:
    """The id of each project's first queued job in queue order (priority, high first, then age, then
    id), for the projects that have one. One LIMIT 1 subquery per project and queued state, which
    PostgreSQL answers from ``jobs_job_queue_idx`` (state, -priority, created_at) in a few index rows
    rather than by reading every queued job (issue 31); the first of the states' heads wins."""
    order = ("-priority", "created_at", "pk")
    heads = {
        f"s{i}": Subquery(
            Job.objects.filter(project_id=OuterRef("pk"), state=state).order_by(*order).values("pk")[:1]
        )
        for i, state in enumerate(QUEUED_STATES)
    }
    found = list(
        Project.objects.filter(pk__in=project_ids).order_by().annotate(**heads).values_list("pk", *heads)
    )
    candidates = Job.objects.filter(pk__in=[pk for _p, *pks in found for pk in pks if pk is not None])
    key = {
        pk: (-priority, created, pk)
        for pk, priority, created in candidates.values_list("pk", "priority", "created_at")
    }
    return {
        project_id: min((pk for pk in pks if pk is not None), key=key.__getitem__)
        for project_id, *pks in found
        if any(pk is not None for pk in pks)
    }


def _flows(rows: dict[int, ProjectRow], projects, *, now, staff: bool, visible: set[str]) -> dict:
    """Borrowing flows (who lends to whom), each other side named as the reader may see it. Returns the
    book's capacity per resource class."""
    slug_to_pk = {p.slug: p.pk for p in projects}
    book = quota_context(now=now, per_job=False).book
    for cls in sorted(book.by_class):
        for flow in book.pools(cls).flows:
            lender = slug_to_pk.get(flow.lender)
            borrower = slug_to_pk.get(flow.borrower)
            if lender is not None:
                rows[lender].lent_cu += flow.amount
                name = flow.borrower if staff or flow.borrower in visible else ANOTHER_PROJECT
                rows[lender].lent_to.append(Flow(name, flow.amount))
            if borrower is not None:
                if flow.lender == admission.ELASTIC:
                    name = admission.ELASTIC
                elif staff or flow.lender in visible:
                    name = flow.lender
                elif flow.lender == f"{rows[borrower].project.department.slug} (unassigned)":
                    name = flow.lender  # the borrower's own department
                elif flow.lender.endswith(" (unassigned)"):
                    name = ANOTHER_DEPARTMENT
                else:
                    name = ANOTHER_PROJECT
                rows[borrower].borrowed_from.append(Flow(name, flow.amount))
    for row in rows.values():
        row.lent_to = _merged(row.lent_to)
        row.borrowed_from = _merged(row.borrowed_from)
    return book.capacity


def _fair_share(
    rows: dict[int, ProjectRow],
    ids: list[int],
    *,
    waiting: set[int],
    now,
    quotas_on: bool,
    staff: bool,
    total_guarantee,
    total_running,
    shares: dict[int, float],
) -> dict[int, tuple[int, int]]:
    """Fair share: the scheduler's factor, and guarantee ÷ all guarantees; use ÷ all use. Returns the
    platform-wide ranks of the factors among the ``waiting`` projects (staff only, see
    ``Board.lower_factor_count``). Each project's factor is its own: one ``fair_shares`` call serves both
    (and the decayed usage it read), and ``shares`` receives them all (``Board.shares``)."""
    factors, usage = fair_shares_and_usage(set(ids) | waiting, now=now) if ids else ({}, {})
    shares.update(factors)
    for row in rows.values():
        row.decayed_usage = usage.get(row.project.pk, 0.0)
        row.factor = factors.get(row.project.pk) if quotas_on else None
        row.fair_share_pct = _pct(row.guarantee, total_guarantee) if quotas_on else None
        row.use_pct = _pct(row.running_cu, total_running)
    ranks: dict[int, tuple[int, int]] = {}
    if quotas_on and ids and staff:  # the platform-wide ranking is for staff (see explain_share)
        all_factors = {pk: factors[pk] for pk in waiting}
        for row in rows.values():
            mine = row.factor or 0.0
            lower = sum(1 for pk, f in all_factors.items() if pk != row.project.pk and f < mine)
            ranks[row.project.pk] = (lower, len(all_factors))
    return ranks


def _preemptions(rows: dict[int, ProjectRow], ids: list[int], *, now, staff: bool, visible: set[str]) -> list:
    """Preemptions in the last day: counted per project, the latest listed."""
    since = now - PREEMPTION_WINDOW
    events = JobEvent.objects.filter(
        kind=JobEvent.Kind.PREEMPTED, created_at__gte=since, job__project_id__in=ids
    )
    # One scan of the events (``kind`` has no index): each one's project, newest first; counted here.
    found = list(events.order_by("-created_at", "-pk").values_list("pk", "job__project_id"))
    for _pk, project_id in found:
        rows[project_id].preempted += 1
    latest = [pk for pk, _project_id in found[:PREEMPTION_LIST_LIMIT]]
    by_pk = JobEvent.objects.select_related("job__project").in_bulk(latest)
    preemptions = []
    for event in (by_pk[pk] for pk in latest):
        cause, _by = preemption_cause(event.message)
        preemptions.append(
            Preemption(
                at=event.created_at,
                job_pk=event.job_id,
                job_name=event.job.name,
                project=event.job.project.slug,
                cause=cause,
                message=_shown(event.message, staff, visible),
            )
        )
    return preemptions


def _departments(
    rows: dict[int, ProjectRow], *, quotas_on: bool, total_guarantee, total_running
) -> tuple[list[DepartmentRow], Figures]:
    """Departments (sums of the rows shown), in name order, and the totals of them all."""
    departments: dict[int, DepartmentRow] = {}
    for row in rows.values():
        dept = row.project.department
        drow = departments.get(dept.pk)
        if drow is None:
            drow = departments[dept.pk] = DepartmentRow(department=dept)
        drow.projects.append(row)
        drow.add(row)
    for dept_id, g in (
        Quota.objects.filter(department_id__in=list(departments))
        .order_by()
        .values_list("department_id")
        .annotate(g=Sum("guaranteed_cu"))
    ):
        departments[dept_id].department_guarantee = g
    totals = Figures()
    for drow in departments.values():
        drow.fair_share_pct = _pct(drow.guarantee, total_guarantee) if quotas_on else None
        drow.use_pct = _pct(drow.running_cu, total_running)
        totals.add(drow)
    return sorted(departments.values(), key=lambda d: (d.department.name, d.department.pk)), totals


def _shown(text, staff: bool, visible: set[str]):
    """A stored text as this reader may read it (``redact`` for members); lazy labels as they are."""
    return text if staff or not isinstance(text, str) else redact(text, visible)


def _merged(flows: list[Flow]) -> list[Flow]:
    amounts: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for f in flows:
        amounts[f.other] += f.amount
    return [Flow(name, amount) for name, amount in sorted(amounts.items(), key=lambda kv: (-kv[1], kv[0]))]


def factor_text(factor: float | None) -> str:
    """The fair-share factor to three places; a small positive one is not printed as 0."""
    if factor is None:
        return "—"
    if 0 < factor < 0.001:
        return "< " + format_number(Decimal("0.001"))
    return format_number(Decimal(str(factor)), 3)
