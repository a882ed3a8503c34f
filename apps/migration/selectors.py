"""Migration reads, scoped by membership: members see their projects' services; staff see all.

Every figure comes from measured data: vendor shares from the billing ledger (``UsageEntry``), track
performance from ``ServiceMetric`` windows, utilization from telemetry attribution
(``JobUtilization``), cost from the ledger, footprint from live ``Allocation`` rows.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Count, Max, Min, QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.billing.models import UsageEntry
from apps.billing.selectors import entries_of_job
from apps.billing.services import allocate_cents, to_cents
from apps.catalog.models import Vendor
from apps.core.errors import NotFound
from apps.inventory.models import Device
from apps.jobs.models import Allocation
from apps.migration import forecast
from apps.migration.models import (
    PHASE_ORDER,
    AccuracyEval,
    Gate,
    MigratedService,
    MigrationAction,
    MigrationPlan,
    Phase,
    PlanPhase,
    ServiceMetric,
    Track,
)
from apps.telemetry.models import JobUtilization

Q2 = Decimal("0.01")
Q4 = Decimal("0.0001")


def _q(value: Decimal, quantum: Decimal = Q2) -> Decimal:
    return Decimal(value).quantize(quantum, rounding=ROUND_HALF_UP)


def vendor_label(vendor: str) -> str:
    return str(Vendor(vendor).label) if vendor in Vendor.values else (vendor or "?")


# ------------------------------------------------------------------ lists


def plan_list(*, user) -> QuerySet[MigrationPlan]:
    """Plans are platform-wide: every user reads them (their services are scoped)."""
    return MigrationPlan.objects.prefetch_related("phases", "gates")


def service_list(*, user) -> QuerySet[MigratedService]:
    qs = MigratedService.objects.select_related(
        "plan", "project", "source_job__project", "target_job__project"
    )
    if is_platform_staff(user):
        return qs
    return qs.filter(project_id__in=user_project_ids(user))


def service_for_user(*, user, pk: int) -> MigratedService:
    service = service_list(user=user).filter(pk=pk).first()
    if service is None:
        raise NotFound(gettext("No such migrated service."))
    return service


def action_list(*, user) -> QuerySet[MigrationAction]:
    qs = MigrationAction.objects.select_related("service", "service__plan", "actor")
    if is_platform_staff(user):
        return qs
    return qs.filter(service__project_id__in=user_project_ids(user))


def metric_list(*, user) -> QuerySet[ServiceMetric]:
    qs = ServiceMetric.objects.select_related("service")
    if is_platform_staff(user):
        return qs
    return qs.filter(service__project_id__in=user_project_ids(user))


def accuracy_list(*, user) -> QuerySet[AccuracyEval]:
    qs = AccuracyEval.objects.select_related("service")
    if is_platform_staff(user):
        return qs
    return qs.filter(service__project_id__in=user_project_ids(user))


def gate_list(*, user) -> QuerySet[Gate]:
    return Gate.objects.select_related("plan")


def phase_list(*, user) -> QuerySet[PlanPhase]:
    return PlanPhase.objects.select_related("plan")


# ------------------------------------------------------------------ vendor share (ledger)


def _ledger(user) -> QuerySet[UsageEntry]:
    qs = UsageEntry.objects.all()
    if not is_platform_staff(user):
        qs = qs.filter(project_id__in=user_project_ids(user))
    return qs


def vendor_share_by_month(*, user, months: int = 12, today: date | None = None) -> list[dict]:
    """Per billing month: compute-unit-hours and amounts by vendor of the card, from the ledger.

    The per-vendor amounts are cents that add up exactly to the month's ledger total in cents
    (largest-remainder split of the raw sub-cent sums, as bills do); CU-hours are exact sums."""
    today = today or timezone.localdate()
    first = date(today.year, today.month, 1)
    for _ in range(months - 1):
        first = (first - timedelta(days=1)).replace(day=1)
    rows = (
        _ledger(user)
        .filter(month__gte=first)
        .order_by()
        .values("month", "allocation__device__vendor")
        .annotate(cu_hours=Sum("cu_hours"), amount=Sum("amount"), entries=Count("pk"))
    )
    by_month: dict[date, list[dict]] = defaultdict(list)
    for row in rows:
        by_month[row["month"]].append(row)
    out = []
    for month in sorted(by_month):
        items = sorted(by_month[month], key=lambda r: r["allocation__device__vendor"] or "")
        raw_total = sum((r["amount"] for r in items), Decimal(0))
        total = to_cents(raw_total)
        cents = allocate_cents([r["amount"] for r in items], total)
        cu_total = sum((r["cu_hours"] for r in items), Decimal(0))
        vendors = []
        for row, amount in zip(items, cents, strict=True):
            vendor = row["allocation__device__vendor"] or ""
            vendors.append(
                {
                    "vendor": vendor,
                    "label": vendor_label(vendor),
                    "cu_hours": row["cu_hours"],
                    "share_pct": _q(row["cu_hours"] * 100 / cu_total) if cu_total else Decimal(0),
                    "amount": amount,
                    "entries": row["entries"],
                }
            )
        out.append(
            {
                "month": month,
                "cu_hours": cu_total,
                "amount": total,
                "vendors": vendors,
            }
        )
    return out


# ------------------------------------------------------------------ footprint


def footprint(*, user, vendors: list[str] | None = None) -> list[dict]:
    """Per vendor now: cards in service (staff only), cards held by live allocations and their compute
    units per hour. Members see what their projects hold."""
    staff = is_platform_staff(user)
    allocations = Allocation.objects.filter(released_at__isnull=True)
    if not staff:
        allocations = allocations.filter(job__project_id__in=user_project_ids(user))
    held = {
        row["device__vendor"]: row
        for row in allocations.order_by()
        .values("device__vendor")
        .annotate(cards=Count("device", distinct=True), cu=Sum("compute_units"))
    }
    fleet = {}
    if staff:
        fleet = dict(
            Device.objects.exclude(health__in=[Device.Health.RETIRED])
            .order_by()
            .values("vendor")
            .annotate(n=Count("pk"))
            .values_list("vendor", "n")
        )
    names = sorted(set(held) | set(fleet)) if vendors is None else vendors
    return [
        {
            "vendor": vendor,
            "label": vendor_label(vendor),
            "cards_in_fleet": fleet.get(vendor) if staff else None,
            "cards_allocated": (held.get(vendor) or {}).get("cards", 0),
            "compute_units": _q((held.get(vendor) or {}).get("cu") or Decimal(0), Q4),
        }
        for vendor in names
    ]


# ------------------------------------------------------------------ track comparison


@dataclass
class TrackFigures:
    track: str
    job_id: int
    job_name: str
    job_state: str
    vendor: str
    replicas: int
    weight: int
    windows: int = 0
    requests: int = 0
    errors: int = 0
    seconds: int = 0
    throughput_rps: Decimal | None = None
    p99_ms: Decimal | None = None
    error_rate_pct: Decimal | None = None
    cu_hours: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    cost_per_1k: Decimal | None = None
    utilization_pct: Decimal | None = None
    sources: list[str] = field(default_factory=list)

    @property
    def vendor_label(self) -> str:
        return vendor_label(self.vendor)


def track_comparison(*, service: MigratedService, start: datetime, end: datetime) -> list[TrackFigures]:
    """Throughput, p99 latency, error rate (ServiceMetric), CU-hours and cost (ledger), cost per 1,000
    requests and utilization (telemetry) per track over [start, end)."""
    out = []
    for track in (Track.SOURCE, Track.TARGET):
        job = service.job_of(track)
        fig = TrackFigures(
            track=track,
            job_id=job.pk,
            job_name=job.name,
            job_state=job.state,
            vendor=service.source_vendor if track == Track.SOURCE else service.target_vendor,
            replicas=job.replicas,
            weight=service.source_weight if track == Track.SOURCE else service.target_weight,
        )
        metrics = ServiceMetric.objects.filter(
            service=service, track=track, window_start__gte=start, window_start__lt=end
        )
        agg = metrics.aggregate(
            n=Count("pk"), requests=Sum("requests"), errors=Sum("errors"), seconds=Sum("window_seconds")
        )
        fig.windows = agg["n"] or 0
        fig.requests, fig.errors, fig.seconds = agg["requests"] or 0, agg["errors"] or 0, agg["seconds"] or 0
        fig.sources = sorted(set(metrics.values_list("source", flat=True)))[:5]
        if fig.seconds:
            # Requests per second of the measured windows (windows of one source tile the time).
            fig.throughput_rps = _q(Decimal(fig.requests) / Decimal(fig.seconds))
        if fig.requests:
            fig.error_rate_pct = _q(Decimal(fig.errors) * 100 / fig.requests, Q4)
        weighted = [
            (r, p) for r, p in metrics.values_list("requests", "p99_latency_ms") if p is not None and r
        ]
        weight = sum(r for r, _ in weighted)
        if weight:
            fig.p99_ms = _q(sum((Decimal(r) * p for r, p in weighted), Decimal(0)) / weight)
        ledger = entries_of_job(UsageEntry.objects.all(), job.pk)
        ledger = ledger.filter(slice_start__gte=start, slice_start__lt=end).aggregate(
            cu=Sum("cu_hours"), amount=Sum("amount"), first=Min("slice_start"), last=Max("slice_end")
        )
        fig.cu_hours = _q(ledger["cu"] or Decimal(0), Q4)
        fig.cost = to_cents(ledger["amount"] or Decimal(0))
        if ledger["first"] is not None:
            # Cost per 1,000 requests over the hours the ledger has metered (not the still-open hour):
            # the requests of the windows inside them.
            metered = metrics.filter(
                window_start__gte=ledger["first"], window_start__lt=ledger["last"]
            ).aggregate(n=Sum("requests"))["n"]
            if metered:
                fig.cost_per_1k = _q(ledger["amount"] * 1000 / metered, Q4)
        util = JobUtilization.objects.filter(
            job=job, window_start__gte=start, window_start__lt=end
        ).aggregate(busy=Sum("busy_pct"), share=Sum("share"))
        if util["share"]:
            fig.utilization_pct = _q(Decimal(str(min(100.0, (util["busy"] or 0.0) / util["share"]))))
        out.append(fig)
    return out


def metric_series(*, service: MigratedService, start: datetime, end: datetime) -> dict[str, list[dict]]:
    """Per track, hourly: requests/s, request-weighted p99 and error rate, for the charts."""
    series: dict[str, dict[datetime, list]] = {Track.SOURCE: {}, Track.TARGET: {}}
    rows = ServiceMetric.objects.filter(
        service=service, window_start__gte=start, window_start__lt=end
    ).values_list("track", "window_start", "window_seconds", "requests", "errors", "p99_latency_ms")
    for track, when, seconds, requests, errors, p99 in rows:
        hour = when.replace(minute=0, second=0, microsecond=0)
        bucket = series[track].setdefault(hour, [0, 0, 0, Decimal(0), 0])
        bucket[0] += requests
        bucket[1] += errors
        bucket[2] += seconds
        if p99 is not None and requests:
            bucket[3] += Decimal(requests) * p99
            bucket[4] += requests
    out: dict[str, list[dict]] = {}
    for track, buckets in series.items():
        out[track] = [
            {
                "hour": hour,
                "rps": _q(Decimal(b[0]) / b[2]) if b[2] else None,
                "p99_ms": _q(b[3] / b[4]) if b[4] else None,
                "error_rate_pct": _q(Decimal(b[1]) * 100 / b[0], Q4) if b[0] else None,
            }
            for hour, b in sorted(buckets.items())
        ]
    return out


# ------------------------------------------------------------------ phase board and forecasts


def phase_board(services: list[MigratedService]) -> list[dict]:
    columns = {phase: [] for phase in PHASE_ORDER}
    for service in services:
        columns[service.phase].append(service)
    return [
        {"phase": phase, "label": Phase(phase).label, "services": columns[phase]} for phase in PHASE_ORDER
    ]


def weight_eta(service: MigratedService) -> datetime | None:
    """When the target track reaches 100 % at the pace of the shifts since the last rollback."""
    actions = list(
        service.actions.filter(
            kind__in=[MigrationAction.Kind.CREATE, MigrationAction.Kind.SHIFT, MigrationAction.Kind.ROLLBACK]
        )
        .order_by("created_at", "id")
        .values_list("kind", "created_at", "to_target_weight")
    )
    points: list[tuple[datetime, float]] = []
    for kind, when, weight in actions:
        if kind == MigrationAction.Kind.ROLLBACK:
            points = []
        if weight is not None:
            points.append((when, float(weight)))
    if not points:
        return None
    return forecast.eta(points, 100.0)


def plan_forecast(*, plan: MigrationPlan, services: list[MigratedService]) -> list[dict]:
    """Per phase: services still to get past it, the trend of promotions out of it, and the date
    the trend reaches the last one (compared with the phase's target end)."""
    phases = {p.phase: p for p in plan.phases.all()}
    ids = [s.pk for s in services]
    promotions = defaultdict(list)
    for from_phase, when in (
        MigrationAction.objects.filter(service_id__in=ids, kind=MigrationAction.Kind.PROMOTE)
        .order_by("created_at")
        .values_list("from_phase", "created_at")
    ):
        promotions[from_phase].append(when)
    start = min((s.created_at for s in services), default=None)
    out = []
    for phase in PHASE_ORDER:
        applies = [s for s in services if phase in s.phases and phase != Phase.REDUCE]
        plan_phase = phases.get(phase)
        row = {
            "phase": phase,
            "label": Phase(phase).label,
            "owner": plan_phase.owner if plan_phase else "",
            "target_start": plan_phase.target_start if plan_phase else None,
            "target_end": plan_phase.target_end if plan_phase else None,
            "services": len(applies),
            "done": 0,
            "eta": None,
            "on_track": None,
        }
        if phase == Phase.REDUCE:
            # Done when every service has reached it and NVIDIA carries none of their traffic.
            reached = [s for s in services if s.phase == Phase.REDUCE]
            row["services"] = len(services)
            row["done"] = len(reached)
            when = [s.phase_changed_at for s in reached if s.phase_changed_at]
            points = [(start, 0.0)] + [(t, float(i + 1)) for i, t in enumerate(sorted(when))] if start else []
        else:
            row["done"] = sum(1 for s in applies if s.phases.index(s.phase) > s.phases.index(phase))
            stamps = sorted(promotions.get(phase, []))
            points = [(start, 0.0)] + [(t, float(i + 1)) for i, t in enumerate(stamps)] if start else []
        if row["services"]:
            row["eta"] = forecast.eta(points, float(row["services"])) if points else None
            if row["done"] >= row["services"]:
                row["eta"] = max((t for t, _ in points), default=None)
            elif row["eta"] and row["eta"] < timezone.now():
                # The trend's date has passed with the phase unfinished: no forecast, not "on track".
                row["eta"], row["stalled"] = None, True
        if row["eta"] and row["target_end"]:
            row["on_track"] = timezone.localtime(row["eta"]).date() <= row["target_end"]
        out.append(row)
    return out


__all__ = [
    "accuracy_list",
    "action_list",
    "footprint",
    "metric_list",
    "phase_board",
    "plan_forecast",
    "plan_list",
    "service_list",
    "track_comparison",
    "vendor_share_by_month",
]


# ------------------------------------------------------------------ measured evidence per workload

# A measured ratio further than this from the ratio the coefficients assume is flagged (relative).
EVIDENCE_TOLERANCE = Decimal("0.15")


def _track_model(job):
    """The device model a track's job runs on: its cards (latest attempt) or, before it ran, its request."""
    allocation = (
        Allocation.objects.filter(job=job, device__device_model__isnull=False)
        .select_related("device__device_model")
        .order_by("-attempt", "-started_at")
        .first()
    )
    if allocation is not None:
        return allocation.device.device_model
    if job.device_model_id:
        return job.device_model
    if job.template_id:
        return job.template.device_model
    return None


def workload_evidence(services: list[MigratedService]) -> list[dict]:
    """Per migrated service with a workload profile: the measured target/source throughput ratio from
    the benchmark library against the ratio the compute coefficients assume, flagged when they disagree
    by more than 15 % — the data behind a coefficient proposal (seed 004 §6: decide with data)."""
    from apps.benchlib.services import per_card_throughput
    from apps.catalog.selectors import coefficients_on

    rows = []
    for service in services:
        if not service.workload_profile_id:
            continue
        source, target = _track_model(service.source_job), _track_model(service.target_job)
        row = {"service": service, "profile": service.workload_profile, "source": source, "target": target}
        row.update(measured=None, assumed=None, flagged=False, measurements=0, synthetic=False)
        if source is not None and target is not None:
            a = per_card_throughput(service.workload_profile, target)
            b = per_card_throughput(service.workload_profile, source)
            coefficients = coefficients_on([source.pk, target.pk])
            if coefficients.get(source.pk) and coefficients.get(target.pk):
                row["assumed"] = (coefficients[target.pk] / coefficients[source.pk]).quantize(Decimal("0.01"))
            if a and b:
                row["measured"] = (a["per_card"] / b["per_card"]).quantize(Decimal("0.01"))
                row["measurements"] = a["measurements"] + b["measurements"]
                row["synthetic"] = a["synthetic"] or b["synthetic"]
            if row["measured"] is not None and row["assumed"]:
                row["flagged"] = abs(row["measured"] / row["assumed"] - 1) > EVIDENCE_TOLERANCE
        rows.append(row)
    return rows


def open_coefficient_proposals():
    from apps.benchlib.models import CoefficientProposal

    return list(
        CoefficientProposal.objects.filter(state=CoefficientProposal.State.OPEN)
        .select_related("device_model", "reference_model")
        .order_by("device_model__name")
    )
