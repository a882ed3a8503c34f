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
from apps.core.stored_text import stored
from apps.migration.models import AccuracyEval, Gate, MigratedService, ServiceMetric, Track

# The result's texts are stored (``MigratedService.gate_results``, a promotion's action) and shown in
# the reader's language (apps.core.stored_text): the sample labels, datasets and metric names are
# shown as written (``user_`` parameters).
METRIC_SOURCE = stored(
    "ServiceMetric: %(target)s target + %(source)s source windows, %(start)s → %(end)s %(zone)s, "
    "from %(user_labels)s"
)
NO_MEASUREMENTS = stored("no measurements on %(missing)s of %(days)s days (first: %(first)s)")
P99_ABOVE = stored("p99 above the source by more than %(threshold)s %% on %(failing)s of %(days)s days")
ERRORS_ABOVE = stored("error rate above %(threshold)s %% on %(failing)s of %(days)s days")
HELD = stored("held on all %(days)s days")
P99_NOTE = stored("%(detail)s (a day's p99 = request-weighted mean of the exported window p99s)")
UNIT_P99 = stored("%(percent)s vs source p99")
UNIT_ERRORS = stored("%(percent)s errors")
ACCURACY_NONE = stored("AccuracyEval: none")
ACCURACY_ABSENT = {
    (Track.SOURCE,): stored("no %(user_metric)s evaluation of the source track"),
    (Track.TARGET,): stored("no %(user_metric)s evaluation of the target track"),
    (Track.SOURCE, Track.TARGET): stored("no %(user_metric)s evaluation of the source and target track"),
}
ACCURACY_SOURCE = stored(
    "AccuracyEval #%(target_id)s (target %(target)s on %(user_target_dataset)s, %(user_target_label)s) "
    "vs #%(source_id)s (source %(source)s on %(user_source_dataset)s, %(user_source_label)s)"
)

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
    return METRIC_SOURCE % {
        "target": counts.get(Track.TARGET, 0),
        "source": counts.get(Track.SOURCE, 0),
        "start": f"{start:%Y-%m-%d %H:%M}",
        "end": f"{end:%Y-%m-%d %H:%M}",
        "zone": zone,
        "user_labels": _sources(qs) or "—",
    }


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
        detail = NO_MEASUREMENTS % {"missing": len(missing), "days": gate.window_days, "first": missing[0]}
    elif failing:
        status = FAIL
        detail = (P99_ABOVE if latency else ERRORS_ABOVE) % {
            "threshold": plain_decimal(gate.threshold),
            "failing": len(failing),
            "days": gate.window_days,
        }
    else:
        status = PASS
        detail = HELD % {"days": gate.window_days}
    if latency:
        detail = P99_NOTE % {"detail": detail}
    return GateResult(
        gate_id=gate.pk,
        kind=gate.kind,
        phase=gate.phase,
        description=gate.describe(),
        status=status,
        measured=None if worst is None else str(worst),
        threshold=plain_decimal(gate.threshold),
        unit=(UNIT_P99 if latency else UNIT_ERRORS) % {"percent": "%"},
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
            source=ACCURACY_NONE,
            detail=ACCURACY_ABSENT[tuple(absent)] % {"user_metric": gate.metric},
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
        source=ACCURACY_SOURCE
        % {
            "target_id": tgt.pk,
            "target": plain_decimal(tgt.value),
            "user_target_dataset": tgt.dataset or "?",
            "user_target_label": tgt.source,
            "source_id": src.pk,
            "source": plain_decimal(src.value),
            "user_source_dataset": src.dataset or "?",
            "user_source_label": src.source,
        },
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
