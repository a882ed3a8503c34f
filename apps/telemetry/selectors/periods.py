"""Report periods, scope checks and the row sets every report reads (card rollups, fleet rollups)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.accounts.selectors import is_platform_staff
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.jobs.models import Allocation
from apps.telemetry.models import (
    SUMMARY_SPANS,
    CardSummary,
    DeviceRollup,
    FleetRollup,
    FleetTotal,
    JobSummary,
    JobUtilization,
    MetricSource,
    NodeSummary,
    Quality,
)
from apps.telemetry.windows import HOUR_S, WINDOW_S, _dt, setting

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
                    _("%(field)s: not an ISO date-time: %(value)s.")
                    % {"field": f"{prefix}{name}", "value": repr(raw)[:60]},
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
            _("%(start)s must be before %(end)s.") % {"start": f"{prefix}start", "end": f"{prefix}end"},
            details={f"{prefix}start": ["before end"]},
        )
    if end_v - start_v > MAX_SPAN:
        raise ValidationFailed(
            _("A report spans at most 400 days."), details={f"{prefix}start": ["span ≤ 400 days"]}
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
    if _two_sources(period, qs):
        return None
    return qs


# Whether the period's fleet rollups come from more than one source, by skipping along the unique
# index (resolution, window_start, source, …): one probe per window and source, stopping at the second
# source, not every row of the period read for a DISTINCT (issue 31: ~35 ms, three times a page).
_TWO_SOURCES_SQL = f"""
WITH RECURSIVE s (w, src, first) AS (
    (SELECT window_start, source, source FROM {FleetRollup._meta.db_table}
     WHERE resolution = %(resolution)s AND window_start >= %(start)s AND window_start < %(end)s
     ORDER BY window_start, source LIMIT 1)
    UNION ALL
    SELECT n.window_start, n.source, s.first FROM s CROSS JOIN LATERAL (
        SELECT f.window_start, f.source FROM {FleetRollup._meta.db_table} f
        WHERE f.resolution = %(resolution)s AND (f.window_start, f.source) > (s.w, s.src)
            AND f.window_start < %(end)s
        ORDER BY f.window_start, f.source LIMIT 1) n
    WHERE s.src = s.first
)
SELECT EXISTS (SELECT 1 FROM s WHERE src <> first)
"""  # noqa: S608 (constants)


def _two_sources(period: Period, qs: QuerySet[FleetRollup]) -> bool:
    from django.db import connection

    if connection.vendor != "postgresql":
        return len(qs.order_by().values_list("source", flat=True).distinct()[:2]) > 1
    params = {"resolution": period.resolution, "start": period.start, "end": period.end}
    with connection.cursor() as cursor:
        cursor.execute(_TWO_SOURCES_SQL, params)
        return bool(cursor.fetchone()[0])


# The groupings the fleet totals hold (vendor and model, stored at ingest); the others are read
# through the node of each fleet rollup.
TOTAL_GROUPS = ("vendor", "model_label")


def _fleet_totals(period: Period, source: str | None) -> QuerySet[FleetTotal]:
    """The period's fleet totals (Σ of the fleet rollups per window, vendor and model); to be read
    only where ``_fleet_rows`` gives rows (one source in the period, or one named)."""
    qs = FleetTotal.objects.filter(
        resolution=period.resolution, window_start__gte=period.start, window_start__lt=period.end
    )
    return qs.filter(source=source) if source else qs


def _allocation_seconds(period: Period, device_ids=None, project_ids=None, excluded_device_ids=None) -> float:
    qs = Allocation.objects.filter(started_at__lt=period.end).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=period.start)
    )
    if device_ids is not None:
        qs = qs.filter(device_id__in=device_ids)
    if excluded_device_ids is not None:  # a few cards (out of service): NOT IN, not a join with every card
        qs = qs.exclude(device_id__in=excluded_device_ids)
    if project_ids is not None:
        qs = qs.filter(project_id__in=project_ids)
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


def _whole_buckets(period: Period, span: int) -> tuple[float, float]:
    """The buckets of ``span`` seconds (UTC) wholly inside the period, as timestamps: ``[first, last)``
    (empty where ``first >= last``); what lies outside them are the period's ragged edges."""
    start, end = period.start.timestamp(), period.end.timestamp()
    return -(-start // span) * span, end // span * span


def _job_sums(qs: QuerySet[JobUtilization]) -> dict:
    """Σ busy %, Σ share, rows and estimated rows of some job utilization rows (None where none)."""
    return qs.aggregate(
        busy=Sum("busy_pct"),
        share=Sum("share"),
        rows=Count("pk"),
        estimated=Count("pk", filter=Q(quality=Quality.ESTIMATED)),
    )


def _job_totals(period: Period, *, source: str | None = None, project_id: int | None = None) -> dict:
    """Σ busy %, Σ share, rows and estimated rows of the period's job utilization (of one source, of
    one project): the hours wholly inside it from the job summaries, only its ragged edges from the
    rows themselves (issue 31). The same figures as the rows alone."""
    first, last = _whole_buckets(period, HOUR_S)
    rows = JobUtilization.objects.all()
    summaries = JobSummary.objects.all()
    if source:
        rows, summaries = rows.filter(source=source), summaries.filter(source=source)
    if project_id is not None:
        rows = rows.filter(project_id_snapshot=project_id)
        summaries = summaries.filter(project_id_snapshot=project_id)
    inside = Q(window_start__gte=period.start, window_start__lt=period.end)
    if first < last:
        inside = Q(window_start__gte=period.start, window_start__lt=_dt(first)) | Q(
            window_start__gte=_dt(last), window_start__lt=period.end
        )
    totals = {key: value or 0 for key, value in _job_sums(rows.filter(inside)).items()}
    if first < last:
        whole = summaries.filter(bucket_start__gte=_dt(first), bucket_start__lt=_dt(last)).aggregate(
            busy=Sum("busy_sum"), share=Sum("share_sum"), rows=Sum("row_count"), estimated=Sum("estimated")
        )
        for key, value in whole.items():
            totals[key] += value or 0
    return totals


def _card_period_rows(
    period: Period, source: str | None, where: str = "", extra: tuple = ()
) -> tuple[str, list]:
    """The period's whole-card rows as ``device_id, util_sum, util_n, util_max, estimated``, as SQL and
    its parameters: the buckets wholly inside the period from the card summaries (an hour per row for
    5-minute rollups, a day for hourly ones), only the ragged edges from the rollups (issue 31). Their
    sums, counts and maximum per card are those of the rollups alone. ``where``: a condition more on
    both (its parameters ``extra``)."""
    return _period_rows(
        period,
        source,
        key="device_id",
        rows=(DeviceRollup, "partition = '' AND ", "CASE WHEN quality = 'estimated' THEN 1 ELSE 0 END"),
        summaries=CardSummary,
        where=where,
        extra=extra,
    )


def _node_period_rows(period: Period, source: str | None) -> tuple[str, list]:
    """The period's fleet rows as ``node_id, util_sum, util_n, util_max, estimated`` (SQL, parameters):
    the buckets wholly inside the period from the node summaries, only the ragged edges from the fleet
    rollups (issue 31); per node, the sums, counts and maximum of the fleet rollups alone."""
    return _period_rows(
        period, source, key="node_id", rows=(FleetRollup, "", "estimated"), summaries=NodeSummary
    )


def _period_rows(
    period: Period,
    source: str | None,
    *,
    key: str,
    rows: tuple,
    summaries,
    where: str = "",
    extra: tuple = (),
) -> tuple[str, list]:
    """``key, util_sum, util_n, util_max, estimated`` of the period: the ragged edges from the ``rows``
    (model, a condition of their own ending in AND, their estimated count in SQL), the buckets wholly
    inside the period from the ``summaries`` of those rows."""
    from django.db import connection

    model, own, estimated = rows
    resolution, span = period.resolution, SUMMARY_SPANS[period.resolution]
    first, last = _whole_buckets(period, span)
    at = connection.ops.adapt_datetimefield_value
    more = f" AND {where}" if where else ""
    raw_where, params = f"{own}resolution = %s", [resolution]
    summary_where, summary_params = "resolution = %s", [resolution]
    if source:
        raw_where += " AND source = %s"
        params.append(source)
        summary_where += " AND source = %s"
        summary_params.append(source)
    if first < last:
        raw_where += (
            " AND (window_start >= %s AND window_start < %s OR window_start >= %s AND window_start < %s)"
        )
        params += [at(period.start), at(_dt(first)), at(_dt(last)), at(period.end)]
    else:
        raw_where += " AND window_start >= %s AND window_start < %s"
        params += [at(period.start), at(period.end)]
    sql = (
        f"SELECT {key}, util_sum, util_n, util_max, "  # noqa: S608 (constants)
        f"{estimated} AS estimated FROM {model._meta.db_table} WHERE {raw_where}{more}"
    )
    params += extra
    if first < last:
        summary_where += " AND bucket_start >= %s AND bucket_start < %s"
        summary_params += [at(_dt(first)), at(_dt(last)), *extra]
        sql += (
            f" UNION ALL SELECT {key}, util_sum, util_n, util_max, estimated "  # noqa: S608 (constants)
            f"FROM {summaries._meta.db_table} WHERE {summary_where}{more}"
        )
        params += summary_params
    return sql, params


def _card_period_sql(
    period: Period, source: str | None, where: str = "", extra: tuple = ()
) -> tuple[str, list]:
    """Per card of the period (``_card_period_rows``), its whole-card rollups summed: ``device_id,
    u_sum, u_n, peak, estimated``, one row per card."""
    rows, params = _card_period_rows(period, source, where, extra)
    sql = (
        "SELECT x.device_id, SUM(x.util_sum) AS u_sum, SUM(x.util_n) AS u_n, MAX(x.util_max) AS peak, "  # noqa: S608
        f"SUM(x.estimated) AS estimated FROM ({rows}) x GROUP BY x.device_id"
    )
    return sql, params
