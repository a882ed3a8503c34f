"""The queue board (issue 29 §7): per project and department, what is queued, running, borrowed and
lent, the fair share against use, who is starved and why, and the preemptions of the last day; and
for one project, "why is my share X?" answered in words from those same figures.

Read-only. It lives in scheduling, not in quotas, because it reads what the scheduling layer writes:
the engine's pending reasons (the constants of ``engine/filters.py``), the quota refusals of the cycle
(``services.QUOTA_REASON``) and the preemption texts (``services`` / ``lifecycle``), which sit above
quotas in the floor plan (tests/core/test_layers.py).

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

Members see the rows of their own projects only; department rows sum only those (never another
project's figures); a reclaim "by project X" the reader cannot see reads as the same cause without
the name (``redact``), a lender or borrower they cannot see as "another project"; the platform-wide
ranking of fair-share factors is for staff only. Shares are of platform-wide totals (sums, no name).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Project
from apps.accounts.selectors import is_platform_staff, project_list
from apps.core.formatting import format_number
from apps.core.stored_text import localize, stored
from apps.jobs.models import ACTIVE_STATES, QUEUED_STATES, Allocation, Job, JobEvent
from apps.quotas import admission
from apps.quotas import services as quota_services
from apps.quotas.book import class_capacity, quota_context
from apps.quotas.models import Quota
from apps.quotas.selectors import decayed_usage, fair_shares, half_life_hours, quotas_configured
from apps.scheduling import lifecycle, proposals
from apps.scheduling import services as cycle
from apps.scheduling.engine import filters

ZERO = Decimal(0)
PREEMPTION_WINDOW = dt.timedelta(hours=24)
LIST_LIMIT = 25  # starved jobs listed per category (all are counted)
PREEMPTION_LIST_LIMIT = 50

# Shown in place of a project (or another department's unassigned guarantee) the reader may not see
# (stored texts: translated where they are shown).
ANOTHER_PROJECT = stored("another project")
ANOTHER_DEPARTMENT = stored("another department's unassigned guarantee")

# --------------------------------------------------------------------------------------------------
# reason categories

QUOTA, DEVICE, TOPOLOGY, VENDOR, OTHER = "quota", "device", "topology", "vendor", "other"
CATEGORIES = (QUOTA, DEVICE, TOPOLOGY, VENDOR, OTHER)
# A job's reason names several causes (one per rejected node): the first category here that occurs
# is the one it is counted under. Topology first (the job's shape is what blocks it), then devices
# (nodes with the right cards exist but they are busy or unfit), then vendor (no node has the card),
# then the rest (node states, reservations, host CPU / memory).
PRECEDENCE = (QUOTA, TOPOLOGY, DEVICE, VENDOR, OTHER)
CATEGORY_LABELS = {
    QUOTA: _("quota"),
    DEVICE: _("devices"),
    TOPOLOGY: _("topology"),
    VENDOR: _("vendor or model"),
    OTHER: _("other reasons"),
}
CATEGORY_HELP = {
    QUOTA: _("the project's guarantee, borrowing limit or lendable capacity refuses the request"),
    DEVICE: _("nodes with matching cards exist, but their cards are busy, too small or unfit"),
    TOPOLOGY: _("the job's shape does not fit: a gang, a switch domain, one cluster"),
    VENDOR: _("no node has the card, feature or runtime the job asks for"),
    OTHER: _("node states, reservations, host CPU or memory, scheduler errors"),
}

# Each counted reason of engine/filters.py, by category ("{}" is the detail the engine fills in).
REASON_CATEGORY: dict[str, str] = {
    **{reason: OTHER for reason in filters.STATUS_REASONS.values()},
    filters.OTHER_POOL: OTHER,
    # "node in another cluster": the per-cluster attempts of a multi-cluster job count every node of
    # the other clusters so; the reasons of that cluster's own nodes say what blocks it.
    filters.OTHER_CLUSTER: OTHER,
    filters.POOL_RESERVED: OTHER,
    filters.NODE_RESERVED: OTHER,
    filters.SELECTOR: OTHER,
    filters.TAINT: OTHER,
    filters.PRECHECK: VENDOR,
    filters.NO_DEVICE: VENDOR,
    filters.MISSING_FEATURE: VENDOR,
    filters.CARD_TOO_SMALL: DEVICE,
    filters.UNHEALTHY: DEVICE,
    filters.GRAY_ONLY: DEVICE,
    filters.DEVICE_RESERVED: DEVICE,
    filters.TOO_FEW: DEVICE,
    filters.CPU: OTHER,
    filters.MEMORY: OTHER,
    filters.CARDS: DEVICE,
    filters.DEVICE_MEMORY: DEVICE,
    filters.DEVICE_COMPUTE: DEVICE,
    filters.DEVICES: DEVICE,
    filters.MIG_PLACEMENT: DEVICE,
    filters.NO_SWITCH: TOPOLOGY,
}

# The engine's explanations around the counted reasons (engine/engine.py, engine/clusters.py), in the
# stored form apps/scheduling/engine_texts.py registers them (tests/quotas/test_board.py checks each is
# registered there).
GANG = "gang of %(replicas)s replicas: only %(placed)s fit. %(detail)s"
GANG_SHORT = "gang of %(replicas)s replicas: only %(placed)s fit"
FALLBACK = "%(detail)s Fallback %(level)s: no switch domain can host every part."
NO_CLUSTER = "no single cluster can hold the whole job (a job never spans clusters): %(failures)s"
# kube-scheduler's frame as ``filters.explain_counts`` writes it (the reason list may be cut at 500
# characters, the length of ``Job.state_reason``).
FRAME = re.compile(
    r"(?P<available>\d+)/(?P<total>\d+) nodes are available(?:: (?P<parts>.*?))?\.?", re.DOTALL
)
COUNTED = re.compile(r"(?P<count>\d+) (?P<reason>.+)", re.DOTALL)

# Why a quota refuses (the inner reason of ``QUOTA_REASON``), most literal first.
QUOTA_DETAILS = (
    (admission.DEPARTMENT_LIMIT, _("the department's borrowing limit")),
    (admission.NOT_LENDABLE, _("nothing idle to borrow")),
    (admission.RECLAIMS_ITSELF, _("nothing idle to borrow")),
    (admission.NEEDS_MEMORY, _("the device memory limit")),
    (admission.BORROW_REFUSED, _("the borrowing limit")),
    (quota_services.UNCOVERED, _("no quota row covers the cards")),
    (quota_services.UNCOVERED_ANY, _("no quota row covers the cards")),
)
# Whole reasons of the scheduling layer that are not the engine's explanation.
OTHER_DETAILS = (
    (cycle.NO_MODEL, _("no device model can provide the request")),
    (cycle.CONFLICT, _("lost a race for capacity; retried next cycle")),
    (cycle.RENDER_FAILED, _("its Kubernetes objects could not be rendered")),
    (proposals.REFUSED, _("the scheduler's proposal was refused; retried next cycle")),
    (lifecycle.REQUEUED_AFTER_PREEMPTION, _("requeued after preemption, waits for the next cycle")),
)

# Why a job was preempted (the reason inside ``lifecycle.PREEMPTED_ATTEMPT``).
LENDER, PRIORITY = "lender", "priority"
PREEMPTION_CAUSES = {
    LENDER: _("a lender took its guarantee back"),
    PRIORITY: _("a higher-priority job of the same project"),
    OTHER: _("other"),
}

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")


def _pattern(msgid: str) -> re.Pattern:
    """A regular expression that matches the texts made from ``msgid`` (``%(name)s`` → a group)."""
    parts, last = [], 0
    for match in _PLACEHOLDER.finditer(msgid):
        parts.append(re.escape(msgid[last : match.start()]))
        parts.append(f"(?P<{match.group(1)}>.+?)")
        last = match.end()
    parts.append(re.escape(msgid[last:]))
    return re.compile("".join(parts), re.DOTALL)


_PATTERNS: dict[str, re.Pattern] = {}


def _match(msgid: str, text: str) -> dict[str, str] | None:
    pattern = _PATTERNS.get(msgid)
    if pattern is None:
        pattern = _PATTERNS[msgid] = _pattern(msgid)
    found = pattern.fullmatch(text)
    return found.groupdict() if found else None


def _reason_pattern(reason: str) -> re.Pattern:
    before, _sep, after = reason.partition("{}")
    return re.compile(re.escape(before) + (".+" if _sep else "") + re.escape(after), re.DOTALL)


# Most literal first: "no free MIG placement for {}" before "no {}".
_COUNTED_REASONS = sorted(
    ((_reason_pattern(reason), reason, category) for reason, category in REASON_CATEGORY.items()),
    key=lambda item: (-len(item[1].replace("{}", "")), item[1]),
)


@dataclass(frozen=True)
class Classified:
    """Why one job waits: its category, and the cause in a few words (an English text of the engine
    or a lazy label; shown through ``|localized``)."""

    category: str
    detail: str


def counted_reason(reason: str) -> tuple[str, str] | None:
    """(constant, category) of one counted reason of the engine ("insufficient free cards"), or None."""
    for pattern, constant, category in _COUNTED_REASONS:
        if pattern.fullmatch(reason):
            return constant, category
    return None


def _explanation(text: str) -> Classified | None:
    """The kube-scheduler style explanation: the category of the reasons by ``PRECEDENCE``, the
    detail the reason of that category that the most nodes give."""
    found = FRAME.fullmatch(text.strip())
    if found is None:
        return None
    by_category: dict[str, Counter] = defaultdict(Counter)
    for part in re.split(r", (?=\d+ )", found.group("parts") or ""):
        counted = COUNTED.fullmatch(part.strip())
        if counted is None:
            continue
        reason = counted.group("reason")
        known = counted_reason(reason)
        if known is None:
            continue  # cut short at 500 characters, or a reason this board does not know
        by_category[known[1]][reason] += int(counted.group("count"))
    for category in PRECEDENCE:
        if by_category.get(category):
            reason, _n = sorted(by_category[category].items(), key=lambda kv: (-kv[1], kv[0]))[0]
            return Classified(category, reason)
    return Classified(OTHER, text)


def _combine(results: list[Classified]) -> Classified | None:
    for category in PRECEDENCE:
        for result in results:
            if result.category == category:
                return result
    return None


def classify(reason: str | None) -> Classified | None:
    """The category a pending job's ``state_reason`` falls in (None: not examined yet).

    Parsed from the texts the scheduling layer writes: ``services.QUOTA_REASON`` (quota), the engine's
    explanation (``filters.explain_counts`` with the reasons of ``REASON_CATEGORY``, the gang,
    switch-domain fallback and one-cluster sentences around it) and the cycle's own reasons
    (``OTHER_DETAILS``). A text none of these made is "other"."""
    text = (reason or "").strip()
    if not text:
        return None
    quota = _match(cycle.QUOTA_REASON, text)
    if quota is not None:
        inner = quota["reason"]
        for msgid, label in QUOTA_DETAILS:
            if _match(msgid, inner) is not None:
                return Classified(QUOTA, label)
        return Classified(QUOTA, inner)
    gang = _match(GANG, text) or _match(GANG_SHORT, text)
    if gang is not None:
        placed = gang.get("placed", "")
        if placed.isdigit() and int(placed) == 0 and gang.get("detail"):
            # Not even one replica fits: what blocks the first one is the cause.
            return classify(gang["detail"]) or Classified(TOPOLOGY, filters.NO_SWITCH)
        return Classified(TOPOLOGY, _("a gang of replicas (all or nothing) does not fit whole"))
    if _match(FALLBACK, text) is not None:
        return Classified(TOPOLOGY, filters.NO_SWITCH)
    clusters = _match(NO_CLUSTER, text)
    if clusters is not None:
        results = []
        for failure in clusters["failures"].split("; "):
            _cluster, _sep, why = failure.partition(": ")
            result = classify(why) if why else None
            if result is not None:
                results.append(result)
        return _combine(results) or Classified(TOPOLOGY, _("no single cluster can hold the whole job"))
    explained = _explanation(text)
    if explained is not None:
        return explained
    for msgid, label in OTHER_DETAILS:
        if _match(msgid, text) is not None:
            return Classified(OTHER, label)
    return Classified(OTHER, text)


def preemption_cause(message: str) -> tuple[str, str | None]:
    """(cause, reclaiming project or None) of a ``JobEvent.Kind.PREEMPTED`` message."""
    event = _match(lifecycle.PREEMPTED_ATTEMPT, message or "")
    reason = event["reason"] if event else (message or "")
    if reason == cycle.RECLAIMED_FOR_LENDER:
        return LENDER, None
    by = _match(cycle.RECLAIMED_BY, reason)
    if by is not None:
        return LENDER, by["project"]
    if _match(cycle.PREEMPTED_FOR, reason) is not None:
        return PRIORITY, None
    return OTHER, None


_BEFORE, _AFTER = cycle.RECLAIMED_BY.split("%(project)s")
_RECLAIMED_BY_ANYWHERE = re.compile(re.escape(_BEFORE) + r"(?P<project>[-\w]+)" + re.escape(_AFTER))


def redact(text: str, visible: set[str]) -> str:
    """``text`` without the name of a reclaiming project the reader may not see:
    ``cycle.RECLAIMED_BY`` ("reclaimed by project X: it needs its guarantee back …", the one stored
    text of a job's own history that names another project) becomes ``cycle.RECLAIMED_FOR_LENDER``,
    the same cause without the name (both are stored texts, shown in the reader's language)."""
    if not text:
        return text
    return _RECLAIMED_BY_ANYWHERE.sub(
        lambda found: found.group(0) if found.group("project") in visible else cycle.RECLAIMED_FOR_LENDER,
        text,
    )


# --------------------------------------------------------------------------------------------------
# the board


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
    active = Allocation.objects.filter(released_at__isnull=True)
    total_running = active.aggregate(s=Coalesce(Sum("compute_units"), ZERO))["s"]
    capacity = class_capacity({"any"}, on=timezone.localdate(now)).get("any")

    # ---- per project -----------------------------------------------------------------------------
    rows = {p.pk: ProjectRow(project=p) for p in projects}
    for pk, g, w in Quota.objects.filter(project_id__in=ids).values_list(
        "project_id", "guaranteed_cu", "over_quota_weight"
    ):
        row = rows[pk]  # weights as ``fair_shares`` reads them: the largest of the rows
        row.weight = max(row.weight, w) if row.has_quota else w
        row.has_quota = True
        row.guarantee += g
    for pk, running, borrowed in (
        active.filter(job__project_id__in=ids)
        .order_by()
        .values_list("job__project_id")
        .annotate(
            cu=Coalesce(Sum("compute_units"), ZERO),
            b=Coalesce(Sum("compute_units", filter=Q(borrowed=True)), ZERO),
        )
    ):
        rows[pk].running_cu, rows[pk].borrowed_cu = running, borrowed
    for pk, n in (
        Job.objects.filter(project_id__in=ids, state__in=ACTIVE_STATES)
        .order_by()
        .values_list("project_id")
        .annotate(n=Count("pk"))
    ):
        rows[pk].running_jobs = n

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
        detail = _shown(result.detail, staff, visible_slugs)
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
                    reason=_shown(job.state_reason, staff, visible_slugs),
                    detail=_shown(result.detail, staff, visible_slugs),
                    waiting_since=job.state_changed_at or job.created_at,
                    requested_cu=job.requested_cu,
                )
            )
    first = {}
    # The first queued job per project; no DISTINCT ON, which only PostgreSQL has (the demo runs on
    # SQLite): the ids in queue order first, then those jobs.
    for project_id, pk in queued.order_by("project_id", "-priority", "created_at", "pk").values_list(
        "project_id", "pk"
    ):
        first.setdefault(project_id, pk)
    jobs_by_pk = queued.in_bulk(list(first.values()))
    first = {project_id: jobs_by_pk[pk] for project_id, pk in first.items()}
    for pk, job in first.items():
        rows[pk].first_queued = job

    # ---- borrowing flows (who lends to whom) ------------------------------------------------------
    slug_to_pk = {p.slug: p.pk for p in projects}
    quotas_on = quotas_configured()
    if quotas_on:
        book = quota_context(now=now, per_job=False).book
        for cls in sorted(book.by_class):
            for flow in book.pools(cls).flows:
                lender = slug_to_pk.get(flow.lender)
                borrower = slug_to_pk.get(flow.borrower)
                if lender is not None:
                    rows[lender].lent_cu += flow.amount
                    name = flow.borrower if staff or flow.borrower in visible_slugs else ANOTHER_PROJECT
                    rows[lender].lent_to.append(Flow(name, flow.amount))
                if borrower is not None:
                    if flow.lender == admission.ELASTIC:
                        name = admission.ELASTIC
                    elif staff or flow.lender in visible_slugs:
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

    # ---- fair share: the scheduler's factor, and guarantee ÷ all guarantees -------------------------
    usage = decayed_usage(ids, now=now) if ids else {}
    factors = fair_shares(ids, now=now) if ids else {}
    for row in rows.values():
        row.decayed_usage = usage.get(row.project.pk, 0.0)
        row.factor = factors.get(row.project.pk) if quotas_on else None
        row.fair_share_pct = _pct(row.guarantee, total_guarantee) if quotas_on else None
        row.use_pct = _pct(row.running_cu, total_running)
    ranks: dict[int, tuple[int, int]] = {}
    if quotas_on and ids and staff:  # the platform-wide ranking is for staff (see explain_share)
        waiting = set(
            Job.objects.filter(state__in=QUEUED_STATES)
            .order_by()
            .values_list("project_id", flat=True)
            .distinct()
        )
        all_factors = fair_shares(waiting, now=now) if waiting else {}
        for row in rows.values():
            mine = row.factor or 0.0
            lower = sum(1 for pk, f in all_factors.items() if pk != row.project.pk and f < mine)
            ranks[row.project.pk] = (lower, len(all_factors))

    # ---- preemptions in the last day --------------------------------------------------------------
    since = now - PREEMPTION_WINDOW
    events = JobEvent.objects.filter(
        kind=JobEvent.Kind.PREEMPTED, created_at__gte=since, job__project_id__in=ids
    )
    for pk, n in events.order_by().values_list("job__project_id").annotate(n=Count("pk")):
        rows[pk].preempted = n
    preemptions = []
    for event in events.select_related("job__project").order_by("-created_at", "-pk")[:PREEMPTION_LIST_LIMIT]:
        cause, _by = preemption_cause(event.message)
        preemptions.append(
            Preemption(
                at=event.created_at,
                job_pk=event.job_id,
                job_name=event.job.name,
                project=event.job.project.slug,
                cause=cause,
                message=_shown(event.message, staff, visible_slugs),
            )
        )

    # ---- departments (sums of the rows shown) ------------------------------------------------------
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

    return Board(
        staff=staff,
        quotas_on=quotas_on,
        half_life_hours=half_life_hours(),
        total_guarantee=total_guarantee,
        total_running=total_running,
        capacity=capacity,
        rows=list(rows.values()),
        departments=sorted(departments.values(), key=lambda d: (d.department.name, d.department.pk)),
        starved=[groups[c] for c in CATEGORIES],
        preemptions=preemptions,
        now=now,
        totals=totals,
        queue_ranks=ranks,
    )


def _shown(text, staff: bool, visible: set[str]):
    """A stored text as this reader may read it (``redact`` for members); lazy labels as they are."""
    return text if staff or not isinstance(text, str) else redact(text, visible)


def _merged(flows: list[Flow]) -> list[Flow]:
    amounts: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for f in flows:
        amounts[f.other] += f.amount
    return [Flow(name, amount) for name, amount in sorted(amounts.items(), key=lambda kv: (-kv[1], kv[0]))]


# --------------------------------------------------------------------------------------------------
# "why is my share X?"


def _cu(value) -> str:
    return format_number(value, 2)


def _pct_text(value) -> str:
    return format_number(value, 1) if value is not None else "—"


def explain_share(board: Board, row: ProjectRow, *, position: int | None = None) -> list[str]:
    """The figures of ``row`` as sentences, in the reader's language: what it is entitled to, what
    it runs, why the two differ, what its waiting jobs wait for and where the queue puts them.
    ``position``: its first waiting job's place in the queue (as the reader may count it)."""
    name = row.project.slug
    out: list[str] = []
    # 1. entitlement
    if not board.quotas_on:
        out.append(
            gettext(
                "No quota is configured on the platform: no share is guaranteed to any project, and the "
                "queue is ordered by priority, then age."
            )
        )
    elif not row.has_quota:
        out.append(
            gettext(
                "%(project)s has no quota: nothing is guaranteed to it and nothing limits it; its fair "
                "share is 0 %% of the %(total)s CU guaranteed to projects."
            )
            % {"project": name, "total": _cu(board.total_guarantee)}
        )
    else:
        out.append(
            gettext(
                "%(project)s is guaranteed %(guarantee)s CU of the %(total)s CU guaranteed to all projects: "
                "its fair share is %(share)s %%."
            )
            % {
                "project": name,
                "guarantee": _cu(row.guarantee),
                "total": _cu(board.total_guarantee),
                "share": _pct_text(row.fair_share_pct),
            }
        )
    # 2. use
    if row.running_cu:
        out.append(
            gettext(
                "It runs %(running)s CU now, %(use)s %% of the %(total)s CU in use on the platform: "
                "%(within)s CU within its guarantee and %(borrowed)s CU borrowed."
            )
            % {
                "running": _cu(row.running_cu),
                "use": _pct_text(row.use_pct),
                "total": _cu(board.total_running),
                "within": _cu(row.within_cu),
                "borrowed": _cu(row.borrowed_cu),
            }
        )
    else:
        out.append(gettext("It runs nothing now: its share of use is 0 %."))
    # 3. why use and share differ
    if row.borrowed_cu:
        lenders = ", ".join(
            gettext("%(cu)s CU from %(lender)s") % {"cu": _cu(f.amount), "lender": _flow_name(f.other)}
            for f in row.borrowed_from
        )
        out.append(
            gettext(
                "Its use is above its guarantee by %(borrowed)s CU borrowed from idle capacity "
                "(%(lenders)s); borrowed capacity is preemptible: it is reclaimed first when a lender "
                "needs its guarantee back."
            )
            % {"borrowed": _cu(row.borrowed_cu), "lenders": lenders or "—"}
        )
    if board.quotas_on and row.has_quota and row.idle_guarantee:
        out.append(
            gettext("%(idle)s CU of its guarantee is idle, so its use is below what it is guaranteed.")
            % {"idle": _cu(row.idle_guarantee)}
        )
    if row.lent_cu:
        borrowers = ", ".join(
            gettext("%(cu)s CU to %(borrower)s") % {"cu": _cu(f.amount), "borrower": _flow_name(f.other)}
            for f in row.lent_to
        )
        out.append(
            gettext(
                "%(lent)s CU of that idle guarantee is lent now (%(borrowers)s); it comes back when "
                "%(project)s needs it: the borrowers are reclaimed."
            )
            % {"lent": _cu(row.lent_cu), "borrowers": borrowers, "project": name}
        )
    # 4. the waiting jobs
    if not row.queued_jobs:
        out.append(gettext("None of its jobs is waiting."))
    else:
        out.append(
            ngettext(
                "%(count)s of its jobs is waiting (%(cu)s CU requested).",
                "%(count)s of its jobs are waiting (%(cu)s CU requested).",
                row.queued_jobs,
            )
            % {"count": row.queued_jobs, "cu": _cu(row.queued_cu)}
        )
        for category in CATEGORIES:
            n = row.starved.get(category, 0)
            if not n:
                continue
            out.append(
                ngettext(
                    "%(count)s waits because of %(category)s: %(detail)s.",
                    "%(count)s wait because of %(category)s: %(detail)s.",
                    n,
                )
                % {
                    "count": n,
                    "category": CATEGORY_LABELS[category],
                    "detail": _detail_text(row.details.get(category)) or CATEGORY_HELP[category],
                }
            )
        if row.unexamined:
            out.append(
                ngettext(
                    "%(count)s has not been examined by the scheduler yet.",
                    "%(count)s have not been examined by the scheduler yet.",
                    row.unexamined,
                )
                % {"count": row.unexamined}
            )
    # 5. the queue order
    if board.quotas_on and row.factor is not None:
        out.append(
            gettext(
                "Its fair-share factor is %(factor)s: %(usage)s CU-hours of recent use (half-life "
                "%(hours)s h) ÷ its guarantee (at least 1 CU) ÷ its weight %(weight)s. Among jobs of "
                "equal priority the queue serves the lowest factor first."
            )
            % {
                "factor": factor_text(row.factor),
                "usage": format_number(row.decayed_usage, 2),
                "hours": format_number(board.half_life_hours, 0),
                "weight": format_number(row.weight),
            }
        )
        if board.staff and row.queued_jobs:
            # Staff only: members' queue figures count the jobs they can see (as their queue positions).
            lower, waiting = board.lower_factor_count(row)
            out.append(
                ngettext(
                    "%(lower)s of the %(waiting)s project with waiting jobs has a lower factor.",
                    "%(lower)s of the %(waiting)s projects with waiting jobs have a lower factor.",
                    waiting,
                )
                % {"lower": lower, "waiting": waiting}
            )
    if row.first_queued is not None and position is not None:
        text = (
            gettext("Its first waiting job, %(job)s, is at position %(position)s of the queue.")
            if board.staff
            else gettext(
                "Its first waiting job, %(job)s, is at position %(position)s of the queue (among the "
                "jobs you can see)."
            )
        )
        out.append(text % {"job": row.first_queued.name, "position": position})
    # 6. preemptions
    if row.preempted:
        out.append(
            ngettext(
                "%(count)s of its jobs was preempted in the last 24 hours.",
                "%(count)s of its jobs were preempted in the last 24 hours.",
                row.preempted,
            )
            % {"count": row.preempted}
        )
    return out


def factor_text(factor: float | None) -> str:
    """The fair-share factor to three places; a small positive one is not printed as 0."""
    if factor is None:
        return "—"
    if 0 < factor < 0.001:
        return "< " + format_number(Decimal("0.001"))
    return format_number(Decimal(str(factor)), 3)


def _flow_name(name: str) -> str:
    if name == admission.ELASTIC:
        return gettext("the elastic pool")
    return localize(name)


def _detail_text(causes: Counter | None) -> str:
    """The most common cause of a category, in the reader's language."""
    if not causes:
        return ""
    detail = causes.most_common(1)[0][0]
    return localize(detail) if isinstance(detail, str) else str(detail)
