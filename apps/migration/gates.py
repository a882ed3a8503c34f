"""Gate evaluation from measured data: ``ServiceMetric`` windows and ``AccuracyEval`` rows.

Every result carries the measured value, the threshold, and where the figures came from (the
``source`` labels of the samples, their count and time span), so a promotion — or its refusal — can
be traced back to the measurements. A gate without enough data fails with ``status = "no_data"``:
a service is never promoted on missing evidence.

Latency: p99 quantiles cannot be averaged exactly; a day's p99 is the request-weighted mean of the
window p99s the service exported (said so in the result). Error rate: Σ errors ÷ Σ requests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Count
from django.utils import timezone

from apps.core.formatting import plain_decimal
from apps.migration.models import AccuracyEval, Gate, MigratedService, ServiceMetric, Track

PASS, FAIL, NO_DATA = "pass", "fail", "no_data"
Q4 = Decimal("0.0001")


@dataclass
class GateResult:
    gate_id: int
    kind: str
    phase: str
    description: str
    status: str  # pass | fail | no_data
    measured: str | None  # Decimal as text (JSON-safe), None when there was nothing to measure
    threshold: str
    unit: str
    source: str
    detail: str
    days: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def as_dict(self) -> dict:
        return asdict(self)


def _q(value: Decimal) -> Decimal:
    return value.quantize(Q4, rounding=ROUND_HALF_UP)


def _sources(qs) -> str:
    labels = sorted(set(qs.values_list("source", flat=True)))
    return ", ".join(labels[:5]) + (f" (+{len(labels) - 5})" if len(labels) > 5 else "")


def _day_buckets(now: datetime, days: int) -> list[tuple[datetime, datetime]]:
    """The last ``days`` 24-hour spans ending at ``now``, oldest first."""
    return [(now - timedelta(days=i + 1), now - timedelta(days=i)) for i in reversed(range(days))]


def _track_day(service: MigratedService, track: str, start: datetime, end: datetime) -> dict | None:
    rows = list(
        ServiceMetric.objects.filter(
            service=service, track=track, window_start__gte=start, window_start__lt=end
        ).values_list("requests", "errors", "p99_latency_ms")
    )
    if not rows:
        return None
    requests = sum(r for r, _e, _p in rows)
    errors = sum(e for _r, e, _p in rows)
    weighted = [(r, p) for r, _e, p in rows if p is not None and r > 0]
    weight = sum(r for r, _p in weighted)
    p99 = _q(sum((Decimal(r) * p for r, p in weighted), Decimal(0)) / weight) if weight else None
    return {
        "samples": len(rows),
        "requests": requests,
        "errors": errors,
        "error_rate_pct": _q(Decimal(errors) * 100 / requests) if requests else None,
        "p99_ms": p99,
    }


def _metric_source(service: MigratedService, start: datetime, end: datetime) -> str:
    qs = ServiceMetric.objects.filter(service=service, window_start__gte=start, window_start__lt=end)
    counts = dict(qs.order_by().values("track").annotate(n=Count("pk")).values_list("track", "n"))
    # In the platform zone, named (issue 21: provenance printed UTC on pages that show Asia/Shanghai).
    zone = timezone.get_default_timezone()
    start, end = timezone.localtime(start, zone), timezone.localtime(end, zone)
    return (
        f"ServiceMetric: {counts.get(Track.TARGET, 0)} target + {counts.get(Track.SOURCE, 0)} source windows, "
        f"{start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M} {zone}, from {_sources(qs) or '—'}"
    )


def _latency_or_errors(gate: Gate, service: MigratedService, now: datetime) -> GateResult:
    buckets = _day_buckets(now, gate.window_days)
    latency = gate.kind == Gate.Kind.P99_LATENCY
    days: list[dict] = []
    worst: Decimal | None = None
    missing: list[str] = []
    failing: list[str] = []
    for start, end in buckets:
        target = _track_day(service, Track.TARGET, start, end)
        source = _track_day(service, Track.SOURCE, start, end) if latency else None
        label = f"{start:%Y-%m-%d %H:%M}"
        if latency:
            if not target or not source or target["p99_ms"] is None or not source["p99_ms"]:
                missing.append(label)
                days.append({"from": start.isoformat(), "value": None})
                continue
            value = _q((target["p99_ms"] - source["p99_ms"]) * 100 / source["p99_ms"])
            day = {
                "from": start.isoformat(),
                "value": str(value),
                "target_p99_ms": str(target["p99_ms"]),
                "source_p99_ms": str(source["p99_ms"]),
            }
        else:
            if not target or target["error_rate_pct"] is None:
                missing.append(label)
                days.append({"from": start.isoformat(), "value": None})
                continue
            value = target["error_rate_pct"]
            day = {
                "from": start.isoformat(),
                "value": str(value),
                "requests": target["requests"],
                "errors": target["errors"],
            }
        days.append(day)
        worst = value if worst is None else max(worst, value)
        if value > gate.threshold:
            failing.append(label)
    source_text = _metric_source(service, buckets[0][0], now)
    if missing:
        status = NO_DATA
        detail = f"no measurements on {len(missing)} of {gate.window_days} days (first: {missing[0]})"
    elif failing:
        status = FAIL
        what = "p99 above the source by more than" if latency else "error rate above"
        detail = f"{what} {plain_decimal(gate.threshold)} % on {len(failing)} of {gate.window_days} days"
    else:
        status = PASS
        detail = f"held on all {gate.window_days} days"
    if latency:
        detail += " (a day's p99 = request-weighted mean of the exported window p99s)"
    return GateResult(
        gate_id=gate.pk,
        kind=gate.kind,
        phase=gate.phase,
        description=gate.describe(),
        status=status,
        measured=None if worst is None else str(worst),
        threshold=plain_decimal(gate.threshold),
        unit="% vs source p99" if latency else "% errors",
        source=source_text,
        detail=detail,
        days=days,
    )


def _accuracy(gate: Gate, service: MigratedService, now: datetime) -> GateResult:
    latest = {}
    for track in (Track.SOURCE, Track.TARGET):
        latest[track] = (
            AccuracyEval.objects.filter(
                service=service, track=track, metric=gate.metric, measured_at__lte=now
            )
            .order_by("-measured_at", "-id")
            .first()
        )
    src, tgt = latest[Track.SOURCE], latest[Track.TARGET]
    if src is None or tgt is None:
        absent = [t for t, row in latest.items() if row is None]
        return GateResult(
            gate_id=gate.pk,
            kind=gate.kind,
            phase=gate.phase,
            description=gate.describe(),
            status=NO_DATA,
            measured=None,
            threshold=plain_decimal(gate.threshold),
            unit=gate.metric,
            source="AccuracyEval: none",
            detail=f"no {gate.metric} evaluation of the {' and '.join(absent)} track",
        )
    delta = _q(tgt.value - src.value)
    status = PASS if abs(delta) <= gate.threshold else FAIL
    return GateResult(
        gate_id=gate.pk,
        kind=gate.kind,
        phase=gate.phase,
        description=gate.describe(),
        status=status,
        measured=str(delta),
        threshold=plain_decimal(gate.threshold),
        unit=f"Δ {gate.metric}",
        source=(
            f"AccuracyEval #{tgt.pk} (target {plain_decimal(tgt.value)} on {tgt.dataset or '?'}, {tgt.source}) "
            f"vs #{src.pk} (source {plain_decimal(src.value)} on {src.dataset or '?'}, {src.source})"
        ),
        detail=f"|Δ| {'≤' if status == PASS else '>'} {plain_decimal(gate.threshold)}",
    )


def gate_evaluate(*, gate: Gate, service: MigratedService, now: datetime | None = None) -> GateResult:
    now = now or timezone.now()
    if gate.kind == Gate.Kind.ACCURACY:
        return _accuracy(gate, service, now)
    return _latency_or_errors(gate, service, now)


def service_gate_results(*, service: MigratedService, now: datetime | None = None) -> list[GateResult]:
    """The results of the gates guarding the service's current phase (none: nothing to meet).
    Accuracy gates apply to training workloads, latency and error gates to inference services."""
    gates = Gate.objects.filter(plan_id=service.plan_id, phase=service.phase).order_by("kind", "id")
    if service.kind == MigratedService.Kind.TRAINING:
        gates = gates.filter(kind=Gate.Kind.ACCURACY)
    else:
        gates = gates.exclude(kind=Gate.Kind.ACCURACY)
    return [gate_evaluate(gate=gate, service=service, now=now) for gate in gates]
