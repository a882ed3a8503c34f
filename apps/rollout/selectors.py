"""Rollout reads: scoped lists, soak measurements, wave blockers, a service's utilization samples.

Soak figures come from the telemetry app's tables (``DeviceRollup`` hourly rows = Σ of the 5-minute
rows, so they cover soaks longer than the 5-minute retention; ``JobUtilization`` for services) and
from the ledger's ``DeviceEvent`` history. Telemetry has no selector for "rollups of these devices
over this period" or "one job's utilization per window" yet, so those queries live here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.core.models import ChangeRecord
from apps.core.stored_text import stored
from apps.inventory.models import Device, DeviceEvent, Node
from apps.rollout.autoscale import Sample
from apps.rollout.models import (
    AutoscalePolicy,
    BenchmarkRun,
    GrayBatch,
    ScaleDecision,
    SoakCriteria,
    SoakResult,
    UpgradePlan,
    UpgradeWave,
)

HOUR = timedelta(hours=1)
# The newest hour of a soak may not be ingested yet: it is not counted against coverage.
INGEST_GRACE = timedelta(minutes=15)
TWO = Decimal("0.01")


# --------------------------------------------------------------------------------------------------
# lists


def criteria_list(*, user) -> QuerySet[SoakCriteria]:
    return SoakCriteria.objects.all() if is_platform_staff(user) else SoakCriteria.objects.none()


def batch_list(*, user) -> QuerySet[GrayBatch]:
    qs = GrayBatch.objects.select_related("criteria", "baseline_run").prefetch_related("nodes")
    return qs if is_platform_staff(user) else qs.none()


def benchmark_run_list(*, user) -> QuerySet[BenchmarkRun]:
    qs = BenchmarkRun.objects.select_related("node", "batch")
    return qs if is_platform_staff(user) else qs.none()


def soak_result_list(*, user) -> QuerySet[SoakResult]:
    qs = SoakResult.objects.select_related("batch")
    return qs if is_platform_staff(user) else qs.none()


def plan_list(*, user) -> QuerySet[UpgradePlan]:
    return UpgradePlan.objects.all() if is_platform_staff(user) else UpgradePlan.objects.none()


def wave_list(*, user) -> QuerySet[UpgradeWave]:
    qs = UpgradeWave.objects.select_related("plan", "batch")
    return qs if is_platform_staff(user) else qs.none()


def policy_list(*, user) -> QuerySet[AutoscalePolicy]:
    qs = AutoscalePolicy.objects.select_related("job", "job__project")
    if is_platform_staff(user):
        return qs
    return qs.filter(job__project_id__in=user_project_ids(user))


def decision_list(*, user) -> QuerySet[ScaleDecision]:
    qs = ScaleDecision.objects.select_related("job", "job__project", "policy")
    if is_platform_staff(user):
        return qs
    return qs.filter(job__project_id__in=user_project_ids(user))


# --------------------------------------------------------------------------------------------------
# node picker and history

PICK_PAGE_SIZE = 25


def node_pick_list(
    *, user, q: str = "", pool_id: int | None = None, cluster_id: int | None = None, status: str = ""
) -> QuerySet[Node]:
    """Nodes a batch may be built from, for the create form's picker (paged by the caller): the
    user's visible nodes (staff: all) minus retired ones, filtered by name (or ``key=value`` on the
    labels), pool, cluster and status, with their cards in service and any gray batch holding them."""
    from apps.inventory import selectors as inventory_selectors

    qs = inventory_selectors.node_list(user=user).exclude(status=Node.Status.RETIRED)
    q = (q or "").strip()
    if "=" in q:
        key, _sep, value = q.partition("=")
        qs = qs.filter(labels__contains={key.strip(): value.strip()})
    elif q:
        qs = qs.filter(name__icontains=q)
    if pool_id:
        qs = qs.filter(pool_id=pool_id)
    if cluster_id:
        qs = qs.filter(cluster_id=cluster_id)
    if status:
        qs = qs.filter(status=status)
    busy = GrayBatch.objects.filter(
        nodes=OuterRef("pk"), stage__in=[GrayBatch.Stage.SOAKING, GrayBatch.Stage.PASSED]
    ).values("name")[:1]
    return qs.annotate(
        cards=Count("devices", filter=~Q(devices__health__in=[Device.Health.RETIRED, Device.Health.LOST])),
        gray_batch=Subquery(busy),
    ).order_by("name", "pk")


def batch_history(batch: GrayBatch, *, limit: int = 50) -> list[ChangeRecord]:
    """The batch's audit records, newest first."""
    from django.contrib.contenttypes.models import ContentType

    return list(
        ChangeRecord.objects.filter(
            content_type=ContentType.objects.get_for_model(GrayBatch), object_id=str(batch.pk)
        )
        .select_related("actor")
        .order_by("-created_at", "-pk")[:limit]
    )


# --------------------------------------------------------------------------------------------------
# waves


def wave_blockers(wave: UpgradeWave) -> list[UpgradeWave]:
    """Waves of earlier layers in the same plan that have not passed (their batch is not passed or
    admitted)."""
    return list(
        UpgradeWave.objects.filter(plan_id=wave.plan_id, layer__lt=wave.layer)
        .exclude(batch__stage__in=[GrayBatch.Stage.PASSED, GrayBatch.Stage.ADMITTED])
        .select_related("batch")
        .order_by("layer", "pk")
    )


# --------------------------------------------------------------------------------------------------
# soak measurement


@dataclass
class SoakMeasure:
    window_start: datetime
    window_end: datetime
    soak_hours: Decimal
    error_events: int = 0
    lost_devices: int = 0
    max_temperature_c: float | None = None
    coverage_pct: Decimal = Decimal("0")
    throughput_baseline: Decimal | None = None
    throughput_measured: Decimal | None = None
    throughput_drop_pct: Decimal | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def _hour_floor(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def _coverage(devices, lost_ids: set[int], seen: dict[int, set[datetime]], *, start: datetime, end: datetime):
    """(the hours already ingestible, % of them with utilization data per card in service)."""
    expected = []
    hour = _hour_floor(start)
    while hour < end - INGEST_GRACE or (not expected and hour < end):
        expected.append(hour)
        hour += HOUR
    per_device = {}
    for device in devices:
        if device.pk in lost_ids:
            continue
        have = len(seen.get(device.pk, set()) & set(expected))
        per_device[str(device)] = round(100 * have / len(expected), 1) if expected else 0.0
    return expected, per_device


def _benchmark_measure(
    measure: SoakMeasure, batch: GrayBatch, *, start: datetime, end: datetime
) -> list[dict]:
    """The soak's runs of the baseline's benchmark, measured against the baseline (into ``measure``)."""
    baseline = batch.baseline_run
    if baseline is None:
        return []
    measure.throughput_baseline = baseline.throughput
    qs = BenchmarkRun.objects.filter(
        batch=batch, name=baseline.name, unit=baseline.unit, measured_at__gte=start, measured_at__lte=end
    ).select_related("node")
    runs = [
        {
            "id": r.pk,
            "node": r.node.name,
            "throughput": str(r.throughput),
            "measured_at": r.measured_at.isoformat(),
        }
        for r in qs.order_by("measured_at", "pk")
    ]
    if runs:
        mean = sum(Decimal(r["throughput"]) for r in runs) / len(runs)
        measure.throughput_measured = mean.quantize(Decimal("0.001"), ROUND_HALF_UP)
        drop = (baseline.throughput - mean) / baseline.throughput * 100
        measure.throughput_drop_pct = drop.quantize(TWO, ROUND_HALF_UP)
    return runs


def _hourly_series(per_hour: dict[datetime, dict[str, Any]]) -> list[dict]:
    return [
        {
            "hour": at.isoformat(),
            "util_avg": round(b["util_sum"] / b["util_n"], 1) if b["util_n"] else None,
            "temp_max": b["temp_max"],
            "counter_errors": b["errors"],
            "error_events": b["events"],
        }
        for at, b in sorted(per_hour.items())
    ]


def soak_measure(*, batch: GrayBatch, now: datetime) -> SoakMeasure:
    """Every figure the soak criteria look at, with the rows behind them, over the soak so far."""
    from apps.telemetry.models import DeviceRollup

    start = batch.soak_started_at
    end = min(now, batch.soak_ended_at) if batch.soak_ended_at else now
    end = max(end, start)
    hours = Decimal((end - start).total_seconds() / 3600).quantize(TWO, ROUND_HALF_UP)
    measure = SoakMeasure(window_start=start, window_end=end, soak_hours=hours)
    node_ids = list(batch.nodes.values_list("pk", flat=True))
    # Cards left out at the start (unhealthy before the soak, services.batch_soak_start) are not judged.
    excluded_ids = {int(e["device"]) for e in batch.excluded_devices or [] if e.get("device")}
    devices = list(
        Device.objects.filter(node_id__in=node_ids)
        .exclude(health=Device.Health.RETIRED)
        .exclude(pk__in=excluded_ids)
        .select_related("node")
        .order_by("node__name", "vendor", "index")
    )
    device_ids = [d.pk for d in devices]

    # Device events: critical ones are errors; lost cards are counted apart.
    # A running soak counts every event since its start (one may be written while we evaluate).
    in_soak = {"created_at__gte": start}
    if batch.soak_ended_at:
        in_soak["created_at__lte"] = batch.soak_ended_at
    events = list(
        DeviceEvent.objects.filter(node_id__in=node_ids, **in_soak)
        .filter(severity=DeviceEvent.Severity.CRITICAL)
        .exclude(kind=DeviceEvent.Kind.LOST)
        .exclude(device_id__in=excluded_ids)
        .order_by("created_at", "pk")
        .values("pk", "created_at", "device_id", "kind", "message")
    )
    # Losses during the soak window only: a LOST event inside it, or a card of the batch that is lost
    # now — unless a LOST event from before the soak shows it already was (batches started before
    # unhealthy cards were left out at the start).
    lost_ids = set(
        DeviceEvent.objects.filter(
            device_id__in=device_ids, kind=DeviceEvent.Kind.LOST, **in_soak
        ).values_list("device_id", flat=True)
    )
    lost_before = set(
        DeviceEvent.objects.filter(
            device_id__in=device_ids, kind=DeviceEvent.Kind.LOST, created_at__lt=start
        ).values_list("device_id", flat=True)
    )
    lost_ids |= {d.pk for d in devices if d.health == Device.Health.LOST and d.pk not in lost_before}
    measure.error_events = len(events)
    measure.lost_devices = len(lost_ids)

    # Telemetry: hourly rollups of the batch's cards during the soak.
    rows = DeviceRollup.objects.filter(
        device_id__in=device_ids,
        resolution=DeviceRollup.Resolution.HOUR,
        window_start__gte=_hour_floor(start),
        window_start__lt=end,
    ).values("device_id", "window_start", "util_sum", "util_n", "temp_max_c", "error_deltas")
    per_hour: dict[datetime, dict[str, Any]] = defaultdict(
        lambda: {"util_sum": 0.0, "util_n": 0, "temp_max": None, "errors": 0.0, "events": 0}
    )
    seen: dict[int, set[datetime]] = defaultdict(set)
    counters: dict[str, float] = defaultdict(float)
    for row in rows:
        bucket = per_hour[row["window_start"]]
        bucket["util_sum"] += row["util_sum"] or 0.0
        bucket["util_n"] += row["util_n"] or 0
        if row["temp_max_c"] is not None:
            bucket["temp_max"] = max(bucket["temp_max"] or row["temp_max_c"], row["temp_max_c"])
            measure.max_temperature_c = max(measure.max_temperature_c or row["temp_max_c"], row["temp_max_c"])
        for name, value in (row["error_deltas"] or {}).items():
            counters[name] += float(value or 0)
            bucket["errors"] += float(value or 0)
        if row["util_n"]:
            seen[row["device_id"]].add(row["window_start"])
    for event in events:
        per_hour[_hour_floor(event["created_at"])]["events"] += 1

    expected, per_device = _coverage(devices, lost_ids, seen, start=start, end=end)
    if per_device:
        measure.coverage_pct = Decimal(str(min(per_device.values()))).quantize(TWO)

    baseline = batch.baseline_run
    runs = _benchmark_measure(measure, batch, start=start, end=end)
    measure.evidence = {
        "devices": len(devices),
        "nodes": len(node_ids),
        "series": _hourly_series(per_hour),
        "error_event_ids": [e["pk"] for e in events][:200],
        "error_event_samples": [
            {"at": e["created_at"].isoformat(), "kind": e["kind"], "message": e["message"]}
            for e in events[:20]
        ],
        "counter_increases": {k: v for k, v in sorted(counters.items()) if v},
        "lost_device_ids": sorted(lost_ids),
        "excluded_device_ids": sorted(excluded_ids),
        "coverage_by_device": per_device,
        "expected_hours": len(expected),
        "benchmark_runs": runs,
        "baseline_run": (
            {
                "id": baseline.pk,
                "name": baseline.name,
                "throughput": str(baseline.throughput),
                "unit": baseline.unit,
            }
            if baseline
            else None
        ),
    }
    return measure


# Violations and what is still missing, stored on the result and read later in the reader's
# language (apps.core.stored_text).
TOO_MANY_ERRORS = stored("%(count)s critical device events (at most %(limit)s)")
TOO_MANY_LOST = stored("%(count)s cards lost (at most %(limit)s)")
TOO_HOT = stored("temperature reached %(value)s °C (at most %(limit)s °C)")
THROUGHPUT_DROP = stored("throughput %(value)s %% below the baseline (at most %(limit)s %%)")
MISSING_SOAK_TIME = stored("soak time: %(hours)s of %(need)s h")
MISSING_COVERAGE = stored(
    "telemetry coverage: %(value)s %% of the soak's hours (needs %(need)s %% for every card)"
)
MISSING_BASELINE = stored("a baseline benchmark run")
MISSING_RUN = stored("a benchmark run on the batch's nodes during the soak")


def soak_judge(criteria: SoakCriteria, m: SoakMeasure) -> tuple[str, list[dict], list[str]]:
    """(verdict, violations, missing): fail on any violated limit; pass once nothing is missing."""
    violations: list[dict] = []

    def over(criterion: str, limit, value, message: str) -> None:
        violations.append(
            {"criterion": criterion, "limit": str(limit), "value": str(value), "message": message}
        )

    if m.error_events > criteria.max_error_events:
        over(
            "max_error_events",
            criteria.max_error_events,
            m.error_events,
            TOO_MANY_ERRORS % {"count": m.error_events, "limit": criteria.max_error_events},
        )
    if m.lost_devices > criteria.max_lost_devices:
        over(
            "max_lost_devices",
            criteria.max_lost_devices,
            m.lost_devices,
            TOO_MANY_LOST % {"count": m.lost_devices, "limit": criteria.max_lost_devices},
        )
    if m.max_temperature_c is not None and m.max_temperature_c > float(criteria.max_temperature_c):
        over(
            "max_temperature_c",
            criteria.max_temperature_c,
            m.max_temperature_c,
            TOO_HOT % {"value": f"{m.max_temperature_c:g}", "limit": criteria.max_temperature_c},
        )
    limit = criteria.max_throughput_drop_pct
    if limit is not None and m.throughput_drop_pct is not None and m.throughput_drop_pct > limit:
        over(
            "max_throughput_drop_pct",
            limit,
            m.throughput_drop_pct,
            THROUGHPUT_DROP % {"value": m.throughput_drop_pct, "limit": limit},
        )
    missing: list[str] = []
    need_hours = criteria.min_days * 24
    if m.soak_hours < need_hours:
        missing.append(MISSING_SOAK_TIME % {"hours": m.soak_hours, "need": need_hours})
    if m.coverage_pct < criteria.min_telemetry_coverage_pct:
        missing.append(
            MISSING_COVERAGE % {"value": m.coverage_pct, "need": criteria.min_telemetry_coverage_pct}
        )
    if limit is not None:
        if m.throughput_baseline is None:
            missing.append(MISSING_BASELINE)
        elif m.throughput_measured is None:
            missing.append(MISSING_RUN)
    if violations:
        return SoakResult.Verdict.FAIL, violations, missing
    if missing:
        return SoakResult.Verdict.PENDING, violations, missing
    return SoakResult.Verdict.PASS, violations, missing


# --------------------------------------------------------------------------------------------------
# autoscaling


def job_utilization_samples(*, job, since: datetime, until: datetime) -> list[Sample]:
    """The service's utilization per telemetry window: Σ attributed busy % / Σ share of the cards it
    held (a whole card busy 60 % → 60 %; a half card whose slice is busy 30 % of the card → 60 %)."""
    from apps.telemetry.models import JobUtilization
    from apps.telemetry.services import WINDOW_S

    sums: dict[datetime, list[float]] = defaultdict(lambda: [0.0, 0.0])
    rows = JobUtilization.objects.filter(
        job=job, window_start__gte=since, window_start__lt=until, busy_pct__isnull=False
    ).values_list("window_start", "busy_pct", "share")
    for window, busy, share in rows:
        acc = sums[window]
        acc[0] += busy
        acc[1] += share
    out = []
    for window in sorted(sums):
        busy, share = sums[window]
        if share <= 0:
            continue
        util = min(100.0, busy / share)
        # The newest window may still be filling: it covers up to ``until`` only.
        end = min(window + timedelta(seconds=WINDOW_S), until)
        span = (end - window).total_seconds()
        if math.isfinite(util) and span > 0:
            out.append(Sample(at=end.timestamp(), util_pct=util, span_s=span))
    return out
