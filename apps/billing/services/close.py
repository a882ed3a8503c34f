"""Month close: meter the month, build every project's bill, then finalize them all and close the month.

Money: a bill is in cents. Its usage amount is the entries' sum rounded half-up to the cent, and the
lines of each breakdown are cent amounts allocated by the largest remainder method (ties broken by line
order), so the lines always add up to the total exactly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Min, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.models import Project
from apps.billing.models import (
    CU_HOURS_QUANTUM,
    Adjustment,
    Bill,
    BillingPeriod,
    BillLine,
    IdlePolicy,
    JobCostSummary,
    UsageEntry,
)
from apps.billing.pricing import to_cents
from apps.billing.services.finalize import _bills_finalize, _ensure_capacity_kept
from apps.billing.services.metering import ledger_lock, metering_run
from apps.billing.services.months import (
    _hours,
    allocate_cents,
    default_currency,
    default_idle_policy,
    month_bounds,
)
from apps.billing.services.rate_cards import RateBook
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core import runs, task_names
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.bulk import copy_create, unsaved
from apps.core.errors import Conflict, ValidationFailed
from apps.core.formatting import format_datetime
from apps.core.stored_text import stored
from apps.inventory.models import Device
from apps.jobs.models import Allocation, Job
from apps.quotas.selectors import guaranteed_cu_hours


def _guaranteed_showback(*, project: Project, month: date) -> Decimal | None:
    """The bill's quota showback: the project's guaranteed CU-hours in the month (apps.quotas), None
    when it has no quota."""
    value = guaranteed_cu_hours(project=project, month=month)
    return None if value is None else Decimal(value).quantize(CU_HOURS_QUANTUM)


ProgressCallback = Callable[[BillingPeriod], None]
# The BackgroundRun kind of a month close (BillingPeriod.close_run).
MONTH_CLOSE_RUN_KIND = "billing.month_close"
# The month close's progress (a stored text, shown in the reader's language: apps.core.stored_text).
METERING = stored("metering")
BUILDING_BILLS = stored("building bills")
BILL_PROGRESS = stored("bill %(done)s/%(total)s: %(project)s")


def _period_for(month: date) -> BillingPeriod:
    period, _created = BillingPeriod.objects.get_or_create(
        month=month, defaults={"idle_policy": default_idle_policy(), "currency": default_currency()}
    )
    return period


def _ensure_ended(month: date, now: datetime | None = None) -> None:
    _start, end = month_bounds(month)
    if end > (now or timezone.now()):
        raise ValidationFailed(
            _("Month %(month)s has not ended yet (it ends %(end)s); only a past month can be closed.")
            % {"month": f"{month:%Y-%m}", "end": format_datetime(end)},
            details={"month": ["not ended"]},
            code="month_not_ended",
        )


def platform_first_use() -> datetime | None:
    """When the platform was first used: the earliest allocation, usage slice or adjustment month."""
    moments = [
        Allocation.objects.order_by().aggregate(first=Min("started_at"))["first"],
        UsageEntry.objects.order_by().aggregate(first=Min("slice_start"))["first"],
    ]
    first_adjusted = Adjustment.objects.order_by().aggregate(first=Min("month"))["first"]
    if first_adjusted is not None:
        moments.append(month_bounds(first_adjusted)[0])
    found = [moment for moment in moments if moment is not None]
    return min(found) if found else None


def _ensure_after_first_use(month: date) -> None:
    """A month that ended before anything ever ran would only make zero bills that can never be
    removed (a finalized bill is immutable): refuse it."""
    _start, end = month_bounds(month)
    first = platform_first_use()
    if first is None:
        raise ValidationFailed(
            _("Month %(month)s cannot be closed: nothing has been allocated or metered yet.")
            % {"month": f"{month:%Y-%m}"},
            details={"month": ["before the platform's first usage"]},
            code="month_before_first_use",
        )
    if end <= first:
        raise ValidationFailed(
            _("Month %(month)s cannot be closed: it ended before the platform's first usage (%(first)s).")
            % {"month": f"{month:%Y-%m}", "first": format_datetime(first)},
            details={"month": ["before the platform's first usage"], "first_use": first.isoformat()},
            code="month_before_first_use",
        )


@transaction.atomic
def month_close_start(
    *, month: date, actor, idle_policy: str | None = None, now: datetime | None = None
) -> BillingPeriod:
    """Mark a month as closing (committed, so progress is visible). Closed months are returned as is.

    Refused before anything is written: a month not yet ended or before the platform's first usage
    (400), a month whose allocations over-book a card (409)."""
    _ensure_ended(month, now)
    _ensure_after_first_use(month)
    if idle_policy is not None and idle_policy not in IdlePolicy.values:
        raise ValidationFailed(
            f"Unknown idle-cost policy {idle_policy!r}.", details={"idle_policy": IdlePolicy.values}
        )
    period = _period_for(month)
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    if period.state == BillingPeriod.State.CLOSED:
        return period
    _ensure_capacity_kept(month)
    earlier_open = BillingPeriod.objects.filter(month__lt=month).exclude(state=BillingPeriod.State.CLOSED)
    if earlier_open.filter(state=BillingPeriod.State.CLOSING).exists():
        raise Conflict(
            _("An earlier month is being closed; wait for it to finish."), code="close_in_progress"
        )
    before = snapshot(period, ["state", "idle_policy"])
    period.state = BillingPeriod.State.CLOSING
    if idle_policy:
        period.idle_policy = idle_policy
    # A new close gets a new run; one left unfinished by a close that stopped is over.
    if period.close_run_id is not None:
        runs.run_fail(run=period.close_run, error="superseded by a new close of this month")
    period.close_run = runs.run_create(
        kind=MONTH_CLOSE_RUN_KIND,
        actor=actor,
        params={"period": period.pk, "month": period.label},
        message=METERING,
    )
    period.save()
    change_record_create(
        actor=actor,
        action="billing.month_close_start",
        obj=period,
        before=before,
        after=snapshot(period, ["state", "idle_policy"]),
    )
    return period


def _progress(
    period: BillingPeriod, *, done: int | None = None, total: int | None = None, message: str = ""
) -> None:
    """Publish the close's progress on its run (seen by the period page while a bill's own
    transaction is still open)."""
    if period.close_run is not None:
        runs.run_progress(run=period.close_run, done=done, total=total, message=message)


def _idle(period: BillingPeriod, used_by_group: dict[tuple, Decimal]) -> tuple[Decimal, Decimal]:
    """(idle CU-hours, idle cost in cents) of the month: in-service capacity minus use, at list price.

    Capacity counts each non-retired card from the later of its registration and the month start;
    its CU are the model's coefficient on the 1st (DESIGN.md "Compute units")."""
    start, end = month_bounds(period.month)
    devices = (
        Device.objects.exclude(health=Device.Health.RETIRED)
        .filter(created_at__lt=end, device_model__isnull=False)
        .values("device_model_id", "node__pool_id", "created_at")
        .annotate(n=Count("pk"))
        .values_list("device_model_id", "node__pool_id", "created_at", "n")
        .order_by()
    )
    capacity_hours: dict[tuple, Decimal] = defaultdict(Decimal)
    for model_id, pool_id, created, n in devices.iterator(chunk_size=5000):  # cards registered together
        capacity_hours[(model_id, pool_id)] += _hours(end - max(start, created)) * n
    if not capacity_hours:
        return Decimal(0), Decimal(0)
    coefficients = coefficients_on({m for m, _p in capacity_hours}, period.month)
    rates = RateBook()
    idle_cu = Decimal(0)
    idle_cost = Decimal(0)
    for (model_id, pool_id), hours in capacity_hours.items():
        coefficient = coefficients.get(model_id)
        if coefficient is None:
            continue
        free = coefficient * hours - used_by_group.get((model_id, pool_id), Decimal(0))
        if free <= 0:
            continue
        _card, price, _discount = rates.price(
            day=period.month, template_id=None, device_model_id=model_id, pool_id=pool_id, project_id=0
        )
        idle_cu += free
        idle_cost += free * price
    return idle_cu.quantize(CU_HOURS_QUANTUM), to_cents(idle_cost)


@dataclass
class _ProjectUsage:
    cu_hours: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)
    entries: int = 0
    resources: list[tuple] = field(default_factory=list)  # (model_id, template_id, cu_hours, amount)
    jobs: list[tuple] = field(default_factory=list)  # (job_id, cu_hours, amount)


def _usage_by_project(month: date) -> tuple[dict[int, _ProjectUsage], dict[tuple, Decimal]]:
    """Every project's usage of the month, and the CU-hours used per (device model, pool) for the idle
    cost: one grouped read of the month's entries (by resource and pool) and the month's job summary."""
    usage: dict[int, _ProjectUsage] = defaultdict(_ProjectUsage)
    used_by_group: dict[tuple, Decimal] = defaultdict(Decimal)
    resources: dict[tuple, list] = {}
    entries = UsageEntry.objects.filter(month=month).order_by()
    for row in entries.values("project_id", "device_model_id", "template_id", "pool_id").annotate(
        cu=Sum("cu_hours"), amount=Sum("amount"), n=Count("pk")
    ):
        used_by_group[(row["device_model_id"], row["pool_id"])] += row["cu"]
        key = (row["project_id"], row["device_model_id"], row["template_id"])
        summed = resources.setdefault(key, [Decimal(0), Decimal(0), 0])
        summed[0] += row["cu"]
        summed[1] += row["amount"]
        summed[2] += row["n"]
    for (project_id, model_id, template_id), (cu, amount, n) in resources.items():
        item = usage[project_id]
        item.resources.append((model_id, template_id, cu, amount))
        item.cu_hours += cu
        item.amount += amount
        item.entries += n
    # per job: the ledger's own summary of the month (kept exact by its insert trigger), not a second
    # pass over the month's entries
    for project_id, job_id, cu, amount in (
        JobCostSummary.objects.filter(month=month, entries__gt=0)
        .order_by()
        .values_list("project_id", "job_id", "cu_hours", "amount")
        .iterator(chunk_size=20000)
    ):
        usage[project_id].jobs.append((job_id, cu, amount))
    return usage, used_by_group


# The idle line's label (stored; the bill page and files show it in the reader's language).
IDLE_LINE_LABEL = stored("idle capacity share")


def _resource_label(model: DeviceModel | None, template: ComputeTemplate | None) -> str:
    name = model.name if model else "?"
    if template is not None:
        return f"{name} · {template.name}"
    return name


def _bill_build(
    *,
    period: BillingPeriod,
    project: Project,
    usage: _ProjectUsage,
    idle_share: Decimal,
    models: dict[int, DeviceModel],
    templates: dict[int, ComputeTemplate],
    jobs: dict[int, Job],
) -> Bill:
    usage_amount = to_cents(usage.amount)
    adjustments = list(
        Adjustment.objects.filter(project=project, month=period.month).order_by("created_at", "pk")
    )
    adjustments_amount = sum((a.amount for a in adjustments), Decimal(0))
    bill = Bill.objects.create(
        project=project,
        period=period,
        month=period.month,
        currency=period.currency,
        used_cu_hours=usage.cu_hours.quantize(CU_HOURS_QUANTUM),
        guaranteed_cu_hours=_guaranteed_showback(project=project, month=period.month),
        entry_count=usage.entries,
        usage_amount=usage_amount,
        adjustments_amount=adjustments_amount,
        idle_share_amount=idle_share,
        total=usage_amount + adjustments_amount + idle_share,
    )
    lines: list[BillLine] = []
    resources = sorted(
        usage.resources,
        key=lambda r: (_resource_label(models.get(r[0]), templates.get(r[1])), r[0] or 0, r[1] or 0),
    )
    for position, (row, cents) in enumerate(
        zip(resources, allocate_cents([r[3] for r in resources], usage_amount), strict=True)
    ):
        model_id, template_id, cu, _raw = row
        lines.append(
            unsaved(
                BillLine,
                bill_id=bill.pk,
                group=BillLine.Group.RESOURCE,
                position=position,
                label=_resource_label(models.get(model_id), templates.get(template_id))[:300],
                device_model_id=model_id,
                template_id=template_id,
                cu_hours=cu.quantize(CU_HOURS_QUANTUM),
                amount=cents,
            )
        )
    job_rows = sorted(usage.jobs, key=lambda r: (jobs[r[0]].name if r[0] in jobs else "", r[0]))
    for position, (row, cents) in enumerate(
        zip(job_rows, allocate_cents([r[2] for r in job_rows], usage_amount), strict=True)
    ):
        job_id, cu, _raw = row
        job = jobs.get(job_id)
        lines.append(
            unsaved(
                BillLine,
                bill_id=bill.pk,
                group=BillLine.Group.JOB,
                position=position,
                label=(f"{job.name} (#{job_id})" if job else f"#{job_id}")[:300],
                job_id=job_id,
                cu_hours=cu.quantize(CU_HOURS_QUANTUM),
                amount=cents,
            )
        )
    for position, adjustment in enumerate(adjustments):
        lines.append(
            unsaved(
                BillLine,
                bill_id=bill.pk,
                group=BillLine.Group.ADJUSTMENT,
                position=position,
                label=adjustment.reason[:300],
                cu_hours=adjustment.cu_hours,
                amount=adjustment.amount,
            )
        )
    if idle_share:
        lines.append(
            unsaved(
                BillLine,
                bill_id=bill.pk,
                group=BillLine.Group.IDLE,
                position=0,
                label=IDLE_LINE_LABEL,
                amount=idle_share,
            )
        )
    copy_create(lines)  # COPY on PostgreSQL (a month's bills are tens of thousands of lines)
    return bill


def month_close_run(
    *,
    period: BillingPeriod,
    actor,
    finalize: bool = True,
    progress: ProgressCallback | None = None,
    capacity_kept: bool = False,
) -> BillingPeriod:
    """Meter the month, build every project's bill (one transaction each, so progress shows), then
    finalize them all and close the month in one transaction. A closed month is returned untouched.

    Finalizing replays the month's capacity invariant (``_ensure_capacity_kept``) unless the caller
    has just replayed it under the ledger lock (``capacity_kept``: ``month_close``, whose start did),
    so one close replays a month of allocations once."""
    period = BillingPeriod.objects.get(pk=period.pk)
    if period.state == BillingPeriod.State.CLOSED:
        return period
    if period.state != BillingPeriod.State.CLOSING:
        raise Conflict(
            _("Month %(month)s is %(state)s, not closing; start the close first.")
            % {"month": period, "state": period.state},
            code="not_closing",
        )
    if period.close_run is None:  # a month marked closing before closes had runs
        period.close_run = runs.run_create(
            kind=MONTH_CLOSE_RUN_KIND, actor=actor, params={"period": period.pk, "month": period.label}
        )
        BillingPeriod.objects.filter(pk=period.pk).update(close_run=period.close_run)
    # Resume: a run left running by a worker that died is taken again (the close is idempotent).
    period.close_run = (
        runs.run_start(run_id=period.close_run.pk, kind=MONTH_CLOSE_RUN_KIND, resume=True) or period.close_run
    )
    try:
        return _month_close_build(
            period=period, actor=actor, finalize=finalize, progress=progress, capacity_kept=capacity_kept
        )
    except Exception as exc:
        # The month stays closing (close_month resumes it); its run says why it stopped.
        runs.run_fail(
            run=period.close_run, error=getattr(exc, "message", None) or str(exc) or type(exc).__name__
        )
        raise


def _month_close_build(
    *, period: BillingPeriod, actor, finalize: bool, progress: ProgressCallback | None, capacity_kept: bool
) -> BillingPeriod:
    start, end = month_bounds(period.month)
    _progress(period, message=METERING)
    metering_run(start=start, end=end, actor=actor)
    with transaction.atomic():
        # Drafts from an earlier run are rebuilt (a finalized bill is never touched).
        BillLine.objects.filter(bill__period=period, bill__state=Bill.State.DRAFT).delete()
        Bill.objects.filter(period=period, state=Bill.State.DRAFT).delete()
    usage, used_by_group = _usage_by_project(period.month)
    idle_cu, idle_cost = _idle(period, used_by_group)
    already = set(Bill.objects.filter(period=period).values_list("project_id", flat=True))
    adjusted = set(Adjustment.objects.filter(month=period.month).values_list("project_id", flat=True))
    projects = list(
        Project.objects.filter(Q(is_active=True) | Q(pk__in=set(usage) | adjusted))
        .exclude(pk__in=already)
        .order_by("slug")
    )
    shares = {p.pk: Decimal(0) for p in projects}
    platform_cost = Decimal(0)
    if period.idle_policy == IdlePolicy.SPREAD and idle_cost:
        users = [p for p in projects if usage.get(p.pk) and usage[p.pk].cu_hours > 0]
        if users:
            for p, cents in zip(
                users, allocate_cents([usage[p.pk].cu_hours for p in users], idle_cost), strict=True
            ):
                shares[p.pk] = cents
        else:
            platform_cost = idle_cost
    elif period.idle_policy == IdlePolicy.PLATFORM:
        platform_cost = idle_cost
    model_ids = {r[0] for u in usage.values() for r in u.resources if r[0]}
    template_ids = {r[1] for u in usage.values() for r in u.resources if r[1]}
    job_ids = {r[0] for u in usage.values() for r in u.jobs}
    models = DeviceModel.objects.in_bulk(model_ids)
    templates = ComputeTemplate.objects.in_bulk(template_ids)
    jobs = Job.objects.only("pk", "name").in_bulk(job_ids)
    _progress(period, done=0, total=len(projects), message=BUILDING_BILLS)
    if progress:
        progress(period)
    for index, project in enumerate(projects, start=1):
        with transaction.atomic():
            _bill_build(
                period=period,
                project=project,
                usage=usage.get(project.pk, _ProjectUsage()),
                idle_share=shares[project.pk],
                models=models,
                templates=templates,
                jobs=jobs,
            )
            _progress(
                period,
                done=index,
                message=BILL_PROGRESS % {"done": index, "total": len(projects), "project": project.slug},
            )
        if progress:
            progress(period)
    with transaction.atomic():
        locked = BillingPeriod.objects.select_for_update().get(pk=period.pk)
        before = snapshot(locked, ["state"])
        locked.idle_cu_hours = idle_cu
        locked.idle_cost = idle_cost
        locked.platform_cost = platform_cost
        if finalize:
            if not capacity_kept:
                _ensure_capacity_kept(locked.month)
            now = timezone.now()
            _bills_finalize(Bill.objects.filter(period=locked, state=Bill.State.DRAFT), now=now)
            locked.state = BillingPeriod.State.CLOSED
            locked.closed_at = now
            locked.closed_by = actor_fields(actor)["actor_label"]
        else:
            locked.state = BillingPeriod.State.DRAFT
        locked.save()
        after = {
            "state": locked.state,
            "bills": locked.bills.count(),
            "idle_cost": str(idle_cost),
            "platform_cost": str(platform_cost),
        }
        change_record_create(
            actor=actor, action="billing.month_close", obj=locked, before=before, after=after
        )
        if period.close_run is not None:
            runs.run_finish(run=period.close_run, result=after, message="")
            locked.close_run = period.close_run
    if progress:
        progress(locked)
    return locked


def month_close(
    *,
    month: date,
    actor,
    finalize: bool = True,
    idle_policy: str | None = None,
    progress: ProgressCallback | None = None,
    now: datetime | None = None,
) -> BillingPeriod:
    """Close a month end to end (the close_month command). Closing a closed month changes nothing.

    The capacity invariant is replayed once, at the start (under the ledger lock, before anything
    is written); finalizing does not replay it again."""
    with ledger_lock("close") as taken:
        if not taken:
            raise Conflict(
                _("Metering or another close is running; try again in a minute."), code="ledger_busy"
            )
        period = month_close_start(month=month, actor=actor, idle_policy=idle_policy, now=now)
        if period.state == BillingPeriod.State.CLOSED:
            return period
        return month_close_run(
            period=period, actor=actor, finalize=finalize, progress=progress, capacity_kept=True
        )


# The billing worker's task that finishes a close, sent by name (worker/ sits above every app).
MONTH_CLOSE_TASK = task_names.MONTH_CLOSE


def month_close_enqueue(*, period: BillingPeriod, finalize: bool = True) -> None:
    """After commit, hand the rest of a started close to the billing worker. Never fails the caller:
    when the broker is down the period stays "closing" and ``close_month`` resumes it."""

    # With the broker down the run stays queued and says so; close_month resumes the close.
    runs.run_enqueue(run=period.close_run, task=MONTH_CLOSE_TASK, args=[period.pk, finalize], queue="billing")
