"""Project and job reports (members of the project, and staff), measured CU hours, a job's card curves."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import (
    Count,
    Q,
    QuerySet,
    Sum,
)
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.core.errors import NotFound
from apps.jobs.models import Allocation, Job
from apps.telemetry.models import DeviceRollup, JobUtilization, Quality
from apps.telemetry.selectors.periods import (
    METHODS,
    Period,
    _allocation_seconds,
    _job_sums,
    _job_totals,
    _quality,
)
from apps.telemetry.windows import HOUR_S, WINDOW_S


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
    return _summary_of(_job_sums(qs))


def _summary_of(agg: dict) -> dict:
    """Utilization, card hours and quality of Σ busy %, Σ share, rows and estimated rows."""
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


def _project_summary(project, period: Period) -> dict:
    return {
        "project": project.pk,
        "slug": project.slug,
        "start": period.start.isoformat(),
        "end": period.end.isoformat(),
        **_summary_of(_job_totals(period, project_id=project.pk)),
        "allocated_card_hours": round(_allocation_seconds(period, project_ids=[project.pk]) / 3600, 3),
        "method": METHODS["effective_utilization"],
    }


def project_summaries(*, user, period: Period) -> list[tuple]:
    """(project, its utilization summary) for each project the user sees: the figures of
    ``project_utilization`` without its curve and job list (the members' telemetry page)."""
    return [(project, _project_summary(project, period)) for project in visible_projects(user=user)]


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
        **_project_summary(project, period),
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
    return _measured(busy, allocation["compute_units"], allocation["compute_milli"])


def _measured(busy: float, compute_units, compute_milli: int) -> Decimal:
    """CU-hours of ``busy`` summed card-busy points (5-minute windows) at the card's coefficient."""
    coefficient = compute_units * 1000 / compute_milli
    hours = Decimal(str(busy)) / 100 * Decimal(WINDOW_S) / Decimal(HOUR_S)
    return (coefficient * hours).quantize(Decimal("0.000001"))


# Per allocation and local hour: the attributed busy points of each source (the first source in the
# database's order is the one counted, as ``measured_cu_hours`` picks it).
_MEASURED_BY_HOUR_SQL = """
SELECT a.id, date_trunc('hour', u.window_start, %(tz)s) AS hour, u.source, SUM(u.busy_pct)
FROM unnest(%(ids)s::bigint[], %(jobs)s::bigint[], %(devices)s::bigint[],
            %(lo)s::timestamptz[], %(hi)s::timestamptz[]) AS a(id, job_id, device_id, lo, hi)
JOIN telemetry_jobutilization u
  ON u.job_id = a.job_id AND u.device_id = a.device_id
 AND u.window_start >= a.lo AND u.window_start < a.hi AND u.busy_pct IS NOT NULL
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
"""


def measured_cu_hours_by_hour(allocations, *, tz: str) -> dict[tuple[int, datetime], Decimal]:
    """``measured_cu_hours`` of many allocations per local hour (time zone ``tz``) in one query.

    ``allocations``: (allocation id, job id, device id, compute units, compute milli, lo, hi) — each
    over [lo, hi), cut at the hours of ``tz``. Returns {(allocation id, hour start): CU-hours} for the
    hours telemetry has a window in (the others: None in ``measured_cu_hours``, so absent here)."""
    from django.db import connection

    wanted = [a for a in allocations if a[4]]
    if not wanted:
        return {}
    params = {
        "tz": tz,
        "ids": [a[0] for a in wanted],
        "jobs": [a[1] for a in wanted],
        "devices": [a[2] for a in wanted],
        "lo": [a[5] for a in wanted],
        "hi": [a[6] for a in wanted],
    }
    units = {a[0]: (a[3], a[4]) for a in wanted}
    found: dict[tuple[int, datetime], Decimal] = {}
    with connection.cursor() as cursor:
        cursor.execute(_MEASURED_BY_HOUR_SQL, params)
        for allocation_id, hour, _source, busy in cursor.fetchall():
            key = (allocation_id, hour)
            if key not in found:  # the first source only
                found[key] = _measured(busy or 0.0, *units[allocation_id])
    return found


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
