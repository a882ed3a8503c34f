"""The quota book as a read model: every quota row, the fleet's capacity per resource class and
what the active allocations hold of each row. Admission (services) and the pages and reports
(selectors) read quotas through this one public API."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from apps.catalog.selectors import coefficients_on
from apps.inventory.models import Device, Node
from apps.jobs.models import Allocation
from apps.quotas import admission
from apps.quotas.models import Quota, ResourceClass, parse_windows


def device_classes(vendor: str, model_id: int | None, pool_id: int | None) -> list[str]:
    """A device's class keys, most specific first."""
    out = []
    if model_id:
        out.append(f"model:{model_id}")
    if pool_id:
        out.append(f"pool:{pool_id}")
    if vendor:
        out.append(f"vendor:{vendor}")
    out.append("any")
    return out


def lending_open(quota: Quota, now: dt.datetime) -> bool:
    if not quota.lending_windows:
        return False
    try:
        windows = parse_windows(quota.lending_windows)
        local = now.astimezone(ZoneInfo(quota.time_zone))
    except (ValueError, KeyError):
        return False
    return admission.window_open(windows, local.hour * 60 + local.minute)


@dataclass
class QuotaContext:
    """The book plus the per-project row lookup; ``project_rows`` is empty for unlimited projects."""

    book: admission.Book
    project_rows: dict[int, dict[str, str]] = field(default_factory=dict)  # project → class → row key
    quotas: dict[str, Quota] = field(default_factory=dict)

    def row_for(self, project_id: int, classes: list[str]) -> str | None:
        rows = self.project_rows.get(project_id, {})
        for cls in classes:
            if cls in rows:
                return rows[cls]
        return None

    def limited(self, project_id: int) -> bool:
        return project_id in self.project_rows

    def verdict_now(self, job) -> str | None:
        """Why the quota would refuse the job's whole request as the book stands (None: it would admit)."""
        rows = self.project_rows.get(job.project_id)
        if not rows or job.requested_cu is None:
            return None
        vendors, model_id = request_targets(job)
        last = None
        for key in rows.values():
            if not may_cover(self.quotas[key], vendors, model_id):
                continue
            verdict = self.book.admit(key, [job.requested_cu])
            if verdict.admitted:
                return None
            last = verdict.reason
        return last


def quota_context(
    *, lock: bool = False, now: dt.datetime | None = None, per_job: bool = True
) -> QuotaContext:
    """Load every quota row (locked ``FOR UPDATE`` in primary-key order when ``lock``), the fleet's
    capacity per class and the active allocations' use of each row.

    Locking every quota row serializes admissions: concurrent cycles can never both take the same
    guarantee or borrowing headroom (they read usage only after the lock is theirs).

    ``per_job=False`` (the pages and reports, which read totals only): the book holds one summed
    holding per project and card class, aggregated in SQL, instead of one per running job; the rows'
    use (``book.used``) and the borrowing flows are the same, ``book.holdings`` names no job.
    """
    now = now or timezone.now()
    qs = Quota.objects.select_related("project", "department", "project__department").order_by("pk")
    if lock:
        qs = qs.select_for_update(of=("self",))
    quotas = list(qs)
    if not quotas:
        return QuotaContext(book=admission.Book())
    rows, departments = [], []
    project_rows: dict[int, dict[str, str]] = defaultdict(dict)
    by_key: dict[str, Quota] = {}
    for q in quotas:
        opened = lending_open(q, now)
        if q.project_id:
            key = str(q.pk)
            by_key[key] = q
            project_rows[q.project_id][q.class_key] = key
            rows.append(
                admission.Row(
                    key=key,
                    project=q.project.slug,
                    department=q.project.department.slug,
                    resource_class=q.class_key,
                    guaranteed=q.guaranteed_cu,
                    borrowing_limit=q.borrowing_limit_cu,
                    lending_limit=q.lending_limit_cu,
                    lending_open=opened,
                    weight=q.over_quota_weight,
                    memory_limit_mib=q.memory_limit_mib,
                )
            )
        else:
            departments.append(
                admission.DepartmentRow(
                    department=q.department.slug,
                    resource_class=q.class_key,
                    guaranteed=q.guaranteed_cu,
                    borrowing_limit=q.borrowing_limit_cu,
                    lending_limit=q.lending_limit_cu,
                    lending_open=opened,
                )
            )
    classes = {r.resource_class for r in rows} | {d.resource_class for d in departments}
    capacity = class_capacity(classes, on=timezone.localdate(now))
    ctx = QuotaContext(
        book=admission.Book(rows, departments, capacity), project_rows=dict(project_rows), quotas=by_key
    )
    for holding in _holdings(ctx) if per_job else _summed_holdings(ctx):
        ctx.book.hold(holding)
    return ctx


def class_capacity(classes: set[str], *, on: dt.date) -> dict[str, Decimal | None]:
    """CU of the usable cards in each class (a card without a coefficient counts 0)."""
    groups = _usable_card_counts()
    coefficients = coefficients_on({m for _v, m, _p, _n in groups if m}, on=on)
    capacity: dict[str, Decimal | None] = {cls: Decimal(0) for cls in classes}
    for vendor, model_id, pool_id, cards in groups:
        coef = coefficients.get(model_id, Decimal(0))
        for cls in device_classes(vendor, model_id, pool_id):
            if cls in capacity:
                capacity[cls] += coef * cards
    return capacity


_USABLE_CARDS_SQL = """
SELECT c.vendor, c.device_model_id, n.pool_id, SUM(c.cards)
FROM (
    SELECT node_id, vendor, device_model_id, COUNT(*) AS cards FROM inventory_device
    WHERE health IN (%s, %s) GROUP BY node_id, vendor, device_model_id
) c JOIN inventory_node n ON n.id = c.node_id
WHERE n.status <> %s
GROUP BY c.vendor, c.device_model_id, n.pool_id
"""


def _usable_card_counts() -> list[tuple[str, int | None, int | None, int]]:
    """(vendor, model, pool, cards) of the usable cards: neither lost nor retired (health is one of
    four, a check constraint), on a node that is not retired.

    Counted per node, vendor and model from inventory_device_capacity_idx alone (no card row read),
    then those few rows a node joined to the nodes: 100,000 cards were a scan and join of every card
    (issue 31)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _USABLE_CARDS_SQL, [Device.Health.HEALTHY, Device.Health.DEGRADED, Node.Status.RETIRED]
        )
        return [(v, m, p, int(n)) for v, m, p, n in cursor.fetchall()]


def _summed_holdings(ctx: QuotaContext) -> list[admission.Holding]:
    """What the active allocations hold of each row, summed in SQL per project, card class and
    borrowed flag (one holding per row and kind, not per job).

    A project whose only quota row is of class "any" holds that row whatever the card
    (``row_for`` ends every card's classes with "any"): its allocations are summed per project without
    joining cards and nodes, the join a fleet of 100,000 cards made cost most (issue 31)."""
    active = Allocation.objects.filter(released_at__isnull=True).order_by()
    any_only = [pk for pk, rows in ctx.project_rows.items() if set(rows) == {"any"}]
    others = [pk for pk in ctx.project_rows if pk not in set(any_only)]
    sums = {"cu": Sum("compute_units"), "memory": Sum("memory_mib")}
    rows = [
        (project_id, "", None, None, borrowed, cu, memory)
        for project_id, borrowed, cu, memory in active.filter(project_id__in=any_only)
        .values_list("project_id", "borrowed")
        .annotate(**sums)
    ]
    if others:
        rows += (
            active.filter(project_id__in=others)
            .values_list(
                "project_id", "device__vendor", "device__device_model_id", "node__pool_id", "borrowed"
            )
            .annotate(**sums)
        )
    summed: dict[str, admission.Holding] = {}
    for project_id, vendor, model_id, pool_id, borrowed, cu, memory in rows:
        key = ctx.row_for(project_id, device_classes(vendor, model_id, pool_id))
        if key is None:
            continue
        h = summed.get(key)
        if h is None:
            h = summed[key] = admission.Holding(
                job=f"row:{key}", row=key, guaranteed=Decimal(0), borrowed=Decimal(0)
            )
        if borrowed:
            h.borrowed += cu
        else:
            h.guaranteed += cu
        h.memory_mib += memory or 0
    return list(summed.values())


def _holdings(ctx: QuotaContext) -> list[admission.Holding]:
    rows = Allocation.objects.filter(
        released_at__isnull=True, project_id__in=list(ctx.project_rows)
    ).values_list(
        "job_id",
        "project_id",
        "job__priority",
        "device__vendor",
        "device__device_model_id",
        "node__pool_id",
        "compute_units",
        "borrowed",
        "memory_mib",
        "started_at",
    )
    grouped: dict[tuple[int, str], admission.Holding] = {}
    for job_id, project_id, priority, vendor, model_id, pool_id, cu, borrowed, memory, started in rows:
        key = ctx.row_for(project_id, device_classes(vendor, model_id, pool_id))
        if key is None:
            continue
        h = grouped.get((job_id, key))
        if h is None:
            h = grouped[(job_id, key)] = admission.Holding(
                job=str(job_id),
                row=key,
                guaranteed=Decimal(0),
                borrowed=Decimal(0),
                priority=priority,
                started=started.timestamp(),
            )
        if borrowed:
            h.borrowed += cu
        else:
            h.guaranteed += cu
        h.memory_mib += memory
        h.started = min(h.started, started.timestamp())
    return list(grouped.values())


def request_targets(job) -> tuple[set[str], int | None]:
    """The vendors and the device model a job's request can run on (empty set: any vendor)."""
    kind = job.request_kind
    if kind == "template":
        return {job.template.device_model.vendor}, job.template.device_model_id
    if kind == "whole_cards":
        if job.device_model_id:
            return {job.device_model.vendor}, job.device_model_id
        return ({job.vendor} if job.vendor else set()), None
    if kind == "compute_units":
        return set(job.allowed_vendors or []), None
    return set(), None


def may_cover(quota: Quota, vendors: set[str], model_id: int | None) -> bool:
    """Whether a quota row may pay for a request on these vendors / this model."""
    if quota.resource_class in (ResourceClass.ANY, ResourceClass.POOL):
        return True
    if quota.resource_class == ResourceClass.VENDOR:
        return not vendors or quota.vendor in vendors
    if model_id is not None:
        return quota.device_model_id == model_id
    return not vendors or quota.device_model.vendor in vendors
