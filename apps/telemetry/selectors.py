"""Telemetry reads and reports.

Scope (pages and API alike): fleet-wide reports (utilization over time, top nodes, idle cards, the
three figures, fragmentation, period comparison, raw rollups) are for platform staff only — they
describe cards and projects a member may not see. A project member sees the utilization of their
own projects and of those projects' jobs. Every figure carries ``quality``: "exact" when it rests
only on exact rows, else "estimated".

Methods (seed 001 §4.1):
- allocation ratio = Σ allocated share × time / Σ card capacity × time (in-service cards of the scope);
- physical utilization = average card busy % over every whole-card 5-minute (or hourly) rollup in the
  window: Σ utilization samples / their count;
- effective utilization = busy / allocated: Σ card-busy points attributed to jobs / Σ allocated share,
  from the job attribution rows (capped at 100 %).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import (
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Least
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.core.errors import NotFound, PermissionDenied, ValidationFailed
from apps.inventory.models import Device
from apps.jobs.models import Allocation, Job
from apps.telemetry.models import DeviceRollup, FleetRollup, JobUtilization, MetricSource, Quality
from apps.telemetry.services import HOUR_S, WINDOW_S, setting

GROUPS = {
    "vendor": "device__vendor",
    "model": "model_label",
    "pool": "pool_label",
    "node": "device__node__name",
    "cluster": "device__node__cluster__slug",
}
MAX_SPAN = timedelta(days=400)
# The dates a report period may name: no telemetry predates 2000, and nothing is planned past 2100.
PERIOD_MIN = datetime(2000, 1, 1, tzinfo=UTC)
PERIOD_MAX = datetime(2100, 1, 1, tzinfo=UTC)
METHODS = {
    "allocation_ratio": gettext_lazy("Σ allocated share × time ÷ Σ card capacity × time (in-service cards)."),
    "physical_utilization": gettext_lazy(
        "Average card busy %: Σ utilization samples ÷ their count, whole-card rollups."
    ),
    "effective_utilization": gettext_lazy(
        "Busy ÷ allocated: Σ card-busy % attributed to jobs ÷ Σ allocated share (≤ 100 %)."
    ),
}


def require_staff(user, what: str = "Fleet-wide utilization reports are") -> None:
    if not is_platform_staff(user):
        raise PermissionDenied(f"{what} for platform staff only; members see their projects' utilization.")


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def resolution(self) -> int:
        """5-minute rows up to two days, hourly rows beyond (and past the 5-minute retention)."""
        five_kept = timezone.now() - timedelta(days=setting("TELEMETRY_ROLLUP_RETENTION_DAYS", 14))
        if self.seconds > 2 * 86400 or self.start < five_kept:
            return HOUR_S
        return WINDOW_S


def period_parse(start: Any, end: Any, *, default_hours: int = 24, prefix: str = "") -> Period:
    """A period from ISO strings / datetimes; defaults to the last ``default_hours`` hours."""
    from django.utils.dateparse import parse_datetime

    def value(raw, name):
        if raw in (None, ""):
            return None
        if isinstance(raw, datetime):
            parsed = raw
        else:
            parsed = parse_datetime(str(raw))
            if parsed is None:
                raise ValidationFailed(
                    f"{prefix}{name}: not an ISO date-time: {raw!r}.",
                    details={f"{prefix}{name}": ["ISO 8601 date-time"]},
                )
        bounds = {"min": PERIOD_MIN.date().isoformat(), "max": PERIOD_MAX.date().isoformat()}
        out_of_range = ValidationFailed(
            _("%(field)s: out of range: %(value)s; a report period lies between %(min)s and %(max)s.")
            % {"field": f"{prefix}{name}", "value": repr(raw)[:60], **bounds},
            details={f"{prefix}{name}": [_("between %(min)s and %(max)s") % bounds]},
        )
        try:
            if timezone.is_naive(parsed):
                parsed = timezone.make_aware(parsed)
            # In UTC: PostgreSQL refuses offsets beyond ±15:59 that ISO 8601 allows (found by fuzzing).
            parsed = parsed.astimezone(UTC)
        except (OverflowError, ValueError):
            raise out_of_range from None
        # Bounded before any arithmetic: end=0001-01-01 minus the default span was an OverflowError (500).
        if not PERIOD_MIN <= parsed <= PERIOD_MAX:
            raise out_of_range
        return parsed

    now = timezone.now()
    end_v = value(end, "end") or now
    start_v = value(start, "start") or end_v - timedelta(hours=default_hours)
    if start_v >= end_v:
        raise ValidationFailed(
            f"{prefix}start must be before {prefix}end.", details={f"{prefix}start": ["before end"]}
        )
    if end_v - start_v > MAX_SPAN:
        raise ValidationFailed(
            "A report spans at most 400 days.", details={f"{prefix}start": ["span ≤ 400 days"]}
        )
    return Period(start_v, end_v)


def _quality(estimated: int) -> str:
    return Quality.ESTIMATED if estimated else Quality.EXACT


def _pct(num: float, den: float) -> float | None:
    return round(100.0 * num / den, 2) if den else None


def rollup_list(*, user) -> QuerySet[DeviceRollup]:
    require_staff(user, "Per-device rollups are")
    return DeviceRollup.objects.select_related("device", "device__node")


def metric_source_list(*, user) -> QuerySet[MetricSource]:
    require_staff(user, "Metric sources are")
    return MetricSource.objects.select_related("cluster")


def _card_rows(period: Period, source: str | None = None) -> QuerySet[DeviceRollup]:
    qs = DeviceRollup.objects.filter(
        partition="",
        resolution=period.resolution,
        window_start__gte=period.start,
        window_start__lt=period.end,
    )
    return qs.filter(source=source) if source else qs


def _annotated(qs: QuerySet[DeviceRollup], *names: str) -> QuerySet[DeviceRollup]:
    """The label annotations ``names`` only: each one joins the card's model or pool for every rollup
    row of the period (issue 20)."""
    labels = {
        "model_label": Coalesce(F("device__device_model__name"), F("device__raw_model_name"), Value("?")),
        "pool_label": Coalesce(F("device__node__pool__name"), Value("—")),
    }
    return qs.annotate(**{name: labels[name] for name in names})


# The fleet rollups' columns for the report's groupings (pool, node and cluster through the node).
FLEET_GROUPS = {
    "vendor": "vendor",
    "model": "model_label",
    "pool": "pool_label",
    "node": "node__name",
    "cluster": "node__cluster__slug",
}


def _fleet_rows(period: Period, source: str | None) -> QuerySet[FleetRollup] | None:
    """The period's fleet rollups (one row per node, vendor, model and window: written at ingest), or
    None where they cannot give the card-level figures exactly: without a source filter and with two
    sources in the period, one card may have a row from each, and a Σ of per-source card counts would
    count it twice (the report then reads the card rollups)."""
    qs = FleetRollup.objects.filter(
        resolution=period.resolution, window_start__gte=period.start, window_start__lt=period.end
    )
    if source:
        return qs.filter(source=source)
    if len(qs.order_by().values_list("source", flat=True).distinct()[:2]) > 1:
        return None
    return qs


# ---------------------------------------------------------------------------------------------------
# Fleet reports (staff)
# ---------------------------------------------------------------------------------------------------


def fleet_utilization(*, user, period: Period, group_by: str = "vendor", source: str | None = None) -> dict:
    """Average card busy % per window and group (vendor / model / pool / node / cluster)."""
    require_staff(user)
    if group_by not in GROUPS:
        raise ValidationFailed(f"Unknown grouping {group_by!r}.", details={"group_by": list(GROUPS)})
    fleet = _fleet_rows(period, source)
    if fleet is not None:
        key = FLEET_GROUPS[group_by]
        if key == "pool_label":
            fleet = fleet.annotate(pool_label=Coalesce(F("node__pool__name"), Value("—")))
        # Σ over the nodes' rows of each window: a card has one row per window and source.
        rows = (
            fleet.values("window_start", key)
            .annotate(
                u_sum=Sum("util_sum"), u_n=Sum("util_n"), cards=Sum("cards"), estimated=Sum("estimated")
            )
            .order_by("window_start", key)
        )
    else:
        key = GROUPS[group_by]
        rows = _fleet_utilization_card_rows(period, source, key)
    series: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if not r["u_n"]:
            continue
        series[str(r[key])].append(
            {
                "window_start": r["window_start"].isoformat(),
                "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
                "cards": r["cards"],
                "quality": _quality(r["estimated"]),
            }
        )
    return {
        "start": period.start.isoformat(),
        "end": period.end.isoformat(),
        "resolution_s": period.resolution,
        "group_by": group_by,
        "method": METHODS["physical_utilization"],
        "series": [{"group": g, "points": pts} for g, pts in sorted(series.items())],
    }


def _fleet_utilization_card_rows(period: Period, source: str | None, key: str) -> QuerySet:
    """fleet_utilization's groups from the card rollups (two sources in the period; and the reference
    the fleet rollups are tested against)."""
    return (
        _annotated(_card_rows(period, source), *(key,) if key in ("model_label", "pool_label") else ())
        .values("window_start", key)
        .annotate(
            u_sum=Sum("util_sum"),
            u_n=Sum("util_n"),
            cards=Count("device", distinct=True),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
        .order_by("window_start", key)
    )


def top_nodes(*, user, period: Period, limit: int = 10, source: str | None = None) -> list[dict]:
    require_staff(user)
    fleet = _fleet_rows(period, source)
    if fleet is None:
        return _top_nodes_from_cards(period, limit, source)
    rows = list(
        fleet.values("node_id", "node__name", "node__cluster__slug")
        .annotate(
            u_sum=Sum("util_sum"),
            u_n=Sum("util_n"),
            peak=Max("util_max"),
            estimated=Sum("estimated"),
        )
        .filter(u_n__gt=0)
        .annotate(busy=ExpressionWrapper(F("u_sum") / F("u_n"), output_field=FloatField()))
        .order_by("-busy", "node__name")[:limit]
    )
    # Distinct cards over the period, for the chosen nodes only (a card has a row in many windows).
    cards = dict(
        _card_rows(period, source)
        .filter(device__node_id__in=[r["node_id"] for r in rows])
        .order_by()
        .values("device__node_id")
        .annotate(cards=Count("device", distinct=True))
        .values_list("device__node_id", "cards")
    )
    out = [
        {
            "node_id": r["node_id"],
            "node": r["node__name"],
            "cluster": r["node__cluster__slug"],
            "cards": cards.get(r["node_id"], 0),
            "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
            "peak_pct": r["peak"],
            "quality": _quality(r["estimated"]),
        }
        for r in rows
    ]
    out.sort(key=lambda r: (-r["utilization_pct"], r["node"]))
    return out[:limit]


def _top_nodes_from_cards(period: Period, limit: int, source: str | None) -> list[dict]:
    rows = (
        _card_rows(period, source)
        .values("device__node_id", "device__node__name", "device__node__cluster__slug")
        .annotate(
            u_sum=Sum("util_sum"),
            u_n=Sum("util_n"),
            cards=Count("device", distinct=True),
            peak=Max("util_max"),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
        .filter(u_n__gt=0)
        # The busiest nodes first, cut in SQL: ten rows back, not one per node of the fleet (issue 20).
        .annotate(busy=ExpressionWrapper(F("u_sum") / F("u_n"), output_field=FloatField()))
        .order_by("-busy", "device__node__name")[:limit]
    )
    out = [
        {
            "node_id": r["device__node_id"],
            "node": r["device__node__name"],
            "cluster": r["device__node__cluster__slug"],
            "cards": r["cards"],
            "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
            "peak_pct": r["peak"],
            "quality": _quality(r["estimated"]),
        }
        for r in rows
    ]
    out.sort(key=lambda r: (-r["utilization_pct"], r["node"]))
    return out[:limit]


def _idle_rows(period: Period, threshold_pct: float | None, source: str | None) -> QuerySet:
    threshold = setting("TELEMETRY_IDLE_UTIL_PCT", 5.0) if threshold_pct is None else threshold_pct
    # The cards first, without joins: some window at or under the threshold and none above it (what the
    # HAVING below says, decided on the rollups alone); only their rows are then joined and grouped.
    low = _card_rows(period, source).filter(util_max__lte=threshold).values("device_id")
    busy = _card_rows(period, source).filter(device_id=OuterRef("pk"), util_max__gt=threshold)
    cards = Device.objects.filter(pk__in=low).filter(~Exists(busy)).values("pk")
    return (
        _annotated(_card_rows(period, source).filter(device_id__in=cards), "model_label")
        .values(
            "device_id",
            "device__node__name",
            "device__vendor",
            "device__index",
            "model_label",
            "device__uuid",
        )
        .annotate(
            u_sum=Sum("util_sum"),
            u_n=Sum("util_n"),
            peak=Max("util_max"),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
        .filter(u_n__gt=0, peak__lte=threshold)
        .exclude(device__health=Device.Health.RETIRED)  # out of service: not idle capacity (issue 21)
        .order_by("device__node__name", "device__index")
    )


def idle_cards(
    *,
    user,
    period: Period,
    threshold_pct: float | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[dict]:
    """Cards whose busy % never exceeded the idle threshold in the window (with telemetry), and whether
    they were allocated meanwhile (allocated and idle = capacity held for nothing); the first ``limit``
    of them (node, index order) when given (the fleet page; its CSV export lists them all)."""
    require_staff(user)
    rows = _idle_rows(period, threshold_pct, source)
    rows = list(rows if limit is None else rows[:limit])
    allocated = set(
        Allocation.objects.filter(device_id__in=[r["device_id"] for r in rows], started_at__lt=period.end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=period.start))
        .values_list("device_id", flat=True)
    )
    return [
        {
            "device_id": r["device_id"],
            "node": r["device__node__name"],
            "vendor": r["device__vendor"],
            "index": r["device__index"],
            "model": r["model_label"],
            "uuid": r["device__uuid"],
            "utilization_pct": round(r["u_sum"] / r["u_n"], 2),
            "peak_pct": r["peak"],
            "allocated": r["device_id"] in allocated,
            "quality": _quality(r["estimated"]),
        }
        for r in rows
    ]


def _allocation_seconds(period: Period, device_ids=None, project_ids=None) -> float:
    qs = Allocation.objects.filter(started_at__lt=period.end).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=period.start)
    )
    if device_ids is not None:
        qs = qs.filter(device_id__in=device_ids)
    if project_ids is not None:
        qs = qs.filter(job__project_id__in=project_ids)
    # Σ overlap × share, summed in SQL per share (a few rows, not one per allocation: issue 20).
    overlap = ExpressionWrapper(
        Least(Coalesce("released_at", Value(period.end)), Value(period.end))
        - Greatest("started_at", Value(period.start)),
        output_field=DurationField(),
    )
    rows = (
        qs.order_by()
        .annotate(overlap=overlap)
        .filter(overlap__gt=timedelta(0))
        .values("compute_milli")
        .annotate(held=Sum("overlap"))
    )
    return sum(row["held"].total_seconds() * row["compute_milli"] / 1000.0 for row in rows if row["held"])


def three_figures(*, user, period: Period, source: str | None = None) -> dict:
    """Allocation ratio, physical utilization and effective utilization side by side (seed 001 §4.1)."""
    require_staff(user)
    devices = Device.objects.exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST])
    device_ids = devices.order_by().values("pk")  # a subquery: no list of every card id (issue 20)
    card_count = devices.count()
    capacity_s = card_count * period.seconds
    allocated_s = _allocation_seconds(period, device_ids=device_ids)
    fleet = _fleet_rows(period, source)
    if fleet is not None:
        card = fleet.aggregate(u_sum=Sum("util_sum"), u_n=Sum("util_n"), estimated=Sum("estimated"))
        # Of the cards counted above (in service): a retired card's old rows made "55 / 54" (issue 21).
        # One index probe per in-service card (its first row in the period), not a pass over every
        # row of the period: a LIMIT 1 subquery, which PostgreSQL does not turn into a hash semi-join,
        # in the rollups' unique key order (device, partition, resolution, window: the probe starts
        # at the period, however long the retention).
        first_row = (
            _card_rows(period, source)
            .filter(device_id=OuterRef("pk"))
            .order_by("partition", "resolution", "window_start")
            .values("pk")[:1]
        )
        card["cards"] = devices.annotate(seen=Subquery(first_row)).filter(seen__isnull=False).count()
    else:
        card = _three_figures_card_rows(period, source, device_ids)
    ju = JobUtilization.objects.filter(window_start__gte=period.start, window_start__lt=period.end)
    if source:
        ju = ju.filter(source=source)
    eff = ju.aggregate(
        busy=Sum("busy_pct"),
        share=Sum("share"),
        estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        rows=Count("pk"),
    )
    effective = None
    if eff["share"]:
        effective = round(min(100.0, (eff["busy"] or 0.0) / eff["share"]), 2)
    return {
        "start": period.start.isoformat(),
        "end": period.end.isoformat(),
        "cards": card_count,
        "cards_with_telemetry": card["cards"] or 0,
        "allocation_ratio_pct": _pct(allocated_s, capacity_s),
        "allocation_ratio_quality": Quality.EXACT,  # from the ledger's allocations, not from metrics
        "physical_utilization_pct": round(card["u_sum"] / card["u_n"], 2) if card["u_n"] else None,
        "physical_utilization_quality": _quality(card["estimated"] or 0),
        "effective_utilization_pct": effective,
        "effective_utilization_quality": _quality(eff["estimated"] or 0)
        if eff["rows"]
        else Quality.ESTIMATED,
        "methods": METHODS,
    }


def _three_figures_card_rows(period: Period, source: str | None, device_ids) -> dict:
    return _card_rows(period, source).aggregate(
        u_sum=Sum("util_sum"),
        u_n=Sum("util_n"),
        cards=Count("device", distinct=True, filter=Q(device_id__in=device_ids)),
        estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
    )


def period_comparison(*, user, baseline: Period, current: Period, source: str | None = None) -> dict:
    """Baseline window vs current window: each figure and the current ÷ baseline ratio (e.g. 31 % → 42 % = 1.35×)."""
    require_staff(user)
    before = three_figures(user=user, period=baseline, source=source)
    after = three_figures(user=user, period=current, source=source)
    out: dict[str, Any] = {"baseline": before, "current": after, "ratios": {}}
    for name in ("allocation_ratio_pct", "physical_utilization_pct", "effective_utilization_pct"):
        a, b = before[name], after[name]
        out["ratios"][name] = round(b / a, 2) if a and b is not None else None
    out["method"] = _(
        "Each figure is computed over each window independently with the methods given; the ratio is "
        "current ÷ baseline (seed 001 §4.1: physical utilization 31 % → 42 % = 1.35×). Rollups are averages "
        "of the exporter's samples (10 s scrapes recommended: coarser ones flatten short peaks). A figure is "
        "estimated when any row under it is."
    )
    return out


def fragmentation(*, user) -> dict:
    """Free capacity (now) that no compute template of the card's model — nor a whole card — can use."""
    require_staff(user)
    from apps.catalog.models import ComputeTemplate
    from apps.catalog.selectors import coefficients_on

    in_service = Device.objects.filter(health__in=[Device.Health.HEALTHY, Device.Health.DEGRADED]).order_by()
    active = Allocation.objects.filter(released_at__isnull=True)
    # A card no active allocation touches is wholly free, hence usable (a whole card fits): counted per
    # model in SQL. Only the cards some allocation holds are read one by one (issue 20).
    idle_by_model = dict(
        in_service.exclude(pk__in=active.values("device_id"))
        .values("device_model_id")
        .annotate(cards=Count("pk"))
        .values_list("device_model_id", "cards")
    )
    used = {
        row["device_id"]: row
        for row in active.filter(device__in=in_service)
        .order_by()
        .values("device_id")
        .annotate(
            mem=Sum("memory_mib"), milli=Sum("compute_milli"), whole=Max(Cast("whole_card", IntegerField()))
        )
        .filter(whole=0, milli__lt=1000)  # a whole card or a full share leaves nothing free
    }
    held = list(
        in_service.filter(pk__in=list(used))
        .select_related("device_model", "node")
        .order_by("node__name", "index")
    )
    templates = defaultdict(list)
    for t in ComputeTemplate.objects.filter(is_retired=False).values(
        "device_model_id", "memory_mib", "compute_share"
    ):
        templates[t["device_model_id"]].append((t["memory_mib"], float(t["compute_share"]) * 10))
    coefficients = coefficients_on(
        {m for m in idle_by_model if m} | {d.device_model_id for d in held if d.device_model_id}
    )
    rows = []
    free_cu = Decimal(0)
    stranded_cu = Decimal(0)
    for model_id, cards in idle_by_model.items():
        coeff = coefficients.get(model_id)
        if coeff is not None:
            free_cu += coeff.quantize(Decimal("0.0001")) * cards
    for d in held:
        mem_used, milli_used = used[d.pk]["mem"] or 0, used[d.pk]["milli"] or 0
        memory = d.memory_mib or (d.device_model.memory_mib if d.device_model_id else None) or 0
        free_milli = max(0, 1000 - milli_used)
        free_mem = max(0, memory - mem_used)
        if free_milli == 0:
            continue
        coeff = coefficients.get(d.device_model_id)
        cu = (coeff * Decimal(free_milli) / 1000).quantize(Decimal("0.0001")) if coeff is not None else None
        fits = [t for t in templates.get(d.device_model_id, []) if t[0] <= free_mem and t[1] <= free_milli]
        usable = bool(fits) or (free_milli == 1000 and not mem_used)
        if cu is not None:
            free_cu += cu
            if not usable:
                stranded_cu += cu
        if not usable:
            rows.append(
                {
                    "device_id": d.pk,
                    "node": d.node.name,
                    "index": d.index,
                    "vendor": d.vendor,
                    "model": d.model_label,
                    "free_compute_milli": free_milli,
                    "free_memory_mib": free_mem,
                    "free_cu": str(cu) if cu is not None else None,
                }
            )
    return {
        "free_cu": str(free_cu),
        "fragmented_cu": str(stranded_cu),
        "fragmented_pct": _pct(float(stranded_cu), float(free_cu)),
        "method": _(
            "Per in-service card: free share = 1000‰ − active allocations; fragmented when no non-retired "
            "compute template of its model fits the free memory and share, and the card is not wholly free. "
            "CU = the model's coefficient × free share."
        ),
        "quality": Quality.EXACT,
        "cards": rows,
    }


# ---------------------------------------------------------------------------------------------------
# Project and job reports (members of the project, and staff)
# ---------------------------------------------------------------------------------------------------


def job_for_user(*, user, pk: int) -> Job:
    from apps.jobs.selectors import job_list

    job = job_list(user=user).filter(pk=pk).first()
    if job is None:
        raise NotFound("No such job.")
    return job


def project_for_user(*, user, pk: int):
    from apps.accounts.selectors import project_list

    project = project_list(user=user).filter(pk=pk).first()
    if project is None:
        raise NotFound("No such project.")
    return project


def _curve(qs: QuerySet[JobUtilization]) -> list[dict]:
    rows = (
        qs.values("window_start")
        .annotate(
            busy=Sum("busy_pct"),
            share=Sum("share"),
            mem=Sum("mem_used_avg_mib"),
            cards=Count("device", distinct=True),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
        .order_by("window_start")
    )
    return [
        {
            "window_start": r["window_start"].isoformat(),
            "utilization_pct": round(min(100.0, (r["busy"] or 0.0) / r["share"]), 2) if r["share"] else None,
            "allocated_cards": round(r["share"], 3),
            "memory_used_mib": round(r["mem"], 1) if r["mem"] is not None else None,
            "cards": r["cards"],
            "quality": _quality(r["estimated"]),
        }
        for r in rows
    ]


def _summary(qs: QuerySet[JobUtilization]) -> dict:
    agg = qs.aggregate(
        busy=Sum("busy_pct"),
        share=Sum("share"),
        rows=Count("pk"),
        estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
    )
    return {
        "utilization_pct": round(min(100.0, (agg["busy"] or 0.0) / agg["share"]), 2)
        if agg["share"]
        else None,
        "card_hours": round((agg["share"] or 0.0) * WINDOW_S / 3600, 3),
        "quality": _quality(agg["estimated"]) if agg["rows"] else None,
    }


def job_utilization(*, user, pk: int, period: Period | None = None) -> dict:
    """A job's utilization curve: busy ÷ allocated per 5-minute window, with quality per point."""
    job = job_for_user(user=user, pk=pk)
    qs = JobUtilization.objects.filter(job=job)
    if period:
        qs = qs.filter(window_start__gte=period.start, window_start__lt=period.end)
    return {
        "job": job.pk,
        "name": job.name,
        "project": job.project.slug,
        **_summary(qs),
        "method": METHODS["effective_utilization"],
        "points": _curve(qs),
    }


def project_utilization(*, user, pk: int, period: Period) -> dict:
    project = project_for_user(user=user, pk=pk)
    qs = JobUtilization.objects.filter(
        project_id_snapshot=project.pk, window_start__gte=period.start, window_start__lt=period.end
    )
    jobs = (
        qs.values("job_id", "job__name", "job__state")
        .annotate(
            busy=Sum("busy_pct"),
            share=Sum("share"),
            estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
        )
        .order_by("job_id")
    )
    return {
        "project": project.pk,
        "slug": project.slug,
        "start": period.start.isoformat(),
        "end": period.end.isoformat(),
        **_summary(qs),
        "allocated_card_hours": round(_allocation_seconds(period, project_ids=[project.pk]) / 3600, 3),
        "method": METHODS["effective_utilization"],
        "points": _curve(qs),
        "jobs": [
            {
                "job": j["job_id"],
                "name": j["job__name"],
                "state": j["job__state"],
                "utilization_pct": round(min(100.0, (j["busy"] or 0.0) / j["share"]), 2)
                if j["share"]
                else None,
                "card_hours": round(j["share"] * WINDOW_S / 3600, 3),
                "quality": _quality(j["estimated"]),
            }
            for j in jobs
        ],
    }


def visible_projects(*, user):
    from apps.accounts.selectors import project_list

    if is_platform_staff(user):
        return project_list(user=user)
    return project_list(user=user).filter(pk__in=user_project_ids(user))


def measured_cu_hours(allocation_id: int, start: datetime, end: datetime) -> Decimal | None:
    """Measured compute-unit-hours of one allocation over [start, end): the card-busy points the
    attribution gave its job on that card in each 5-minute window × the card's coefficient. None where
    telemetry has no window for it (billing then uses the allocated figure). One source only, so two
    sources covering the same card never double the figure. Billing's metering reads it when the usage
    basis is "max" (apps.billing.services.metering_run)."""
    allocation = (
        Allocation.objects.filter(pk=allocation_id)
        .values("job_id", "device_id", "compute_units", "compute_milli")
        .first()
    )
    if allocation is None or not allocation["compute_milli"]:
        return None
    rows = JobUtilization.objects.filter(
        job_id=allocation["job_id"],
        device_id=allocation["device_id"],
        window_start__gte=start,
        window_start__lt=end,
        busy_pct__isnull=False,
    )
    source = rows.order_by("source").values_list("source", flat=True).first()
    if source is None:
        return None
    busy = rows.filter(source=source).aggregate(total=Sum("busy_pct"))["total"] or 0.0
    coefficient = allocation["compute_units"] * 1000 / allocation["compute_milli"]
    hours = Decimal(str(busy)) / 100 * Decimal(WINDOW_S) / Decimal(HOUR_S)
    return (coefficient * hours).quantize(Decimal("0.000001"))


# -- the job page's per-card curves (issue 21) ----------------------------------------------------

# The exporter that reports each vendor's cards (../shared/reference/hardware-telemetry.md §1.1-1.5).
EXPORTERS = {
    "nvidia": "dcgm-exporter",
    "huawei": "Ascend NPU Exporter",
    "amd": "ROCm device-metrics-exporter",
    "hygon": "Hygon dcu-exporter",
    "cambricon": "Cambricon mlu-exporter",
}
# metric key -> the rollup column drawn for it.
CARD_METRICS = {
    "utilization": "util_avg",
    "memory": "mem_used_avg_mib",
    "temperature": "temp_max_c",
    "power": "power_avg_w",
}
# The page stays light: up to a day of a job's life is drawn in 5-minute windows (≤ 288 points a
# card), longer ones in hourly windows, and at most the last 14 days (≤ 336 points a card).
CARD_CURVE_FINE_SPAN = timedelta(days=1)
CARD_CURVE_MAX_SPAN = timedelta(days=14)


def _exporter_name(source: str, vendor: str) -> str:
    if source.startswith("simulated:"):
        return _("the simulated cluster's telemetry")
    return EXPORTERS.get(vendor) or _("the %(vendor)s exporter") % {"vendor": vendor}


def job_card_curves(*, user, pk: int, now: datetime | None = None) -> dict:
    """Per card the job held: its utilization, memory used, temperature and power per rollup window
    over the time the job held it (one source per card: the one with the most windows). A metric the
    card's source never gave is named, with the exporter, in ``missing`` — never drawn as zero."""
    from apps.core.templatetags.suanchi import DEVICE_KIND_BY_VENDOR

    job = job_for_user(user=user, pk=pk)
    now = now or timezone.now()
    allocations = list(
        Allocation.objects.filter(job=job)
        .select_related("device", "node")
        .order_by("node__name", "device__index", "started_at", "id")
    )
    if not allocations:
        return {"job": job.pk, "resolution": WINDOW_S, "clipped": False, "cards": []}
    start = min(a.started_at for a in allocations)
    end = max(a.released_at or now for a in allocations)
    clipped = end - start > CARD_CURVE_MAX_SPAN
    if clipped:
        start = end - CARD_CURVE_MAX_SPAN
    resolution = WINDOW_S if end - start <= CARD_CURVE_FINE_SPAN else HOUR_S
    spans: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    for a in allocations:
        spans[a.device_id].append((a.started_at, a.released_at or now))
    floor = datetime.fromtimestamp(int(start.timestamp()) // resolution * resolution, tz=UTC)
    rows = (
        DeviceRollup.objects.filter(
            device_id__in=list(spans),
            resolution=resolution,
            window_start__gte=floor,
            window_start__lt=end,
        )
        .order_by("window_start")
        .values("device_id", "partition", "source", "quality", "window_start", *CARD_METRICS.values())
    )
    by_device: dict[int, list[dict]] = defaultdict(list)
    step = timedelta(seconds=resolution)
    for row in rows:
        held = any(
            row["window_start"] + step > s and row["window_start"] < e for s, e in spans[row["device_id"]]
        )
        if held:
            by_device[row["device_id"]].append(row)
    cards = []
    seen: set[int] = set()
    for a in allocations:
        if a.device_id in seen:
            continue
        seen.add(a.device_id)
        device = a.device
        found = by_device.get(a.device_id, [])
        # One partition (the whole card when it has rows) and one source, so no window is doubled.
        partitions = {r["partition"] for r in found}
        partition = "" if "" in partitions or not partitions else sorted(partitions)[0]
        found = [r for r in found if r["partition"] == partition]
        sources = Counter(r["source"] for r in found)
        source = sources.most_common(1)[0][0] if sources else ""
        found = [r for r in found if r["source"] == source]
        exporter = _exporter_name(source, device.vendor) if source else EXPORTERS.get(device.vendor, "")
        points = [
            {
                "window_start": r["window_start"].isoformat(),
                "quality": r["quality"],
                **{metric: r[column] for metric, column in CARD_METRICS.items()},
            }
            for r in found
        ]
        missing = [metric for metric in CARD_METRICS if points and all(p[metric] is None for p in points)]
        cards.append(
            {
                "device": device.pk,
                "label": f"{a.node.name} · {DEVICE_KIND_BY_VENDOR.get(device.vendor, 'GPU')}{device.index}",
                "uuid": device.uuid,
                "vendor": device.vendor,
                "partition": partition,
                "source": source,
                "exporter": exporter,
                "points": points,
                "missing": missing,
            }
        )
    return {"job": job.pk, "resolution": resolution, "clipped": clipped, "cards": cards}
