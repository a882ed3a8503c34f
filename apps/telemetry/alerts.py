"""Alert rules' measurements and the evaluation of every rule (the beat task
``worker.tasks.notify.alerts_evaluate_task`` every minute).

The rules, their hysteresis (``pending → firing → resolved``) and their notifications are notify's
(``apps.notify.alerts``); what a rule watches is measured here, where cards, allocations, quotas and
clusters may be read: each kind's measure gives one ``Observation`` per subject, ``None`` when there
is no fresh measurement (unknown: the alert keeps its state).

Kinds (``KINDS``) and what the threshold means:

==================== ============================================================================
utilization_low      % busy of an allocated card (the newest 5-minute whole-card rollup), alert
                     when **below** the floor; clear at floor + margin.
temperature          °C (the newest rollup's maximum), alert when at or above; clear at − margin.
device_errors        hardware errors in the last ``duration_s`` (at least 5 min): increases of the
                     fault counters (ECC double-bit / uncorrectable, uncorrectable remapped rows:
                     ``apps.telemetry.rollups.FAULT_COUNTERS``) plus XID / fault codes the
                     exporter reported; alert when at or above — at once, the duration is the
                     look-back window; clear at − margin.
card_silent          minutes since the card's last sample (cards never measured are unknown), alert
                     when at or above; clear at − margin.
quota_used           % of what a project quota may ever hold (guarantee + borrowing limit), alert
                     when at or above; clear at − margin.
cluster_unreachable  consecutive failed reconcile / push passes (``apps.clusters.health``), alert
                     when at or above; clear at − margin.
==================== ============================================================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.accounts.models import Project
from apps.clusters.health import cluster_health
from apps.inventory.models import Cluster, Device
from apps.jobs.models import Allocation
from apps.notify.alerts import Kind, Observation, rule_evaluate
from apps.notify.models import AlertRule
from apps.quotas.book import quota_context
from apps.quotas.models import Quota
from apps.telemetry.models import DeviceRollup, Resolution
from apps.telemetry.rollups import FAULT_COUNTERS

log = logging.getLogger(__name__)

FRESH_S = 900  # a rollup window older than this is not "now" (three 5-minute windows)
SILENCE_LOOKBACK = timedelta(days=7)
MIN_ERROR_WINDOW_S = 300


def _device_params(device: Device) -> dict[str, Any]:
    return {"device": f"{device.vendor}{device.index}", "node": device.node.name}


def _scoped_devices(rule: AlertRule, *, allocated_only: bool) -> dict[int, tuple[Device, list[Project]]]:
    """Cards in the rule's scope → (card, projects holding it). ``allocated_only``: only cards with an
    active allocation (of the rule's project, when it has one)."""
    allocations = Allocation.objects.filter(released_at__isnull=True).select_related("project")
    if rule.project_id:
        allocations = allocations.filter(project_id=rule.project_id)
    if rule.cluster_id:
        allocations = allocations.filter(node__cluster_id=rule.cluster_id)
    holders: dict[int, list[Project]] = {}
    for allocation in allocations:
        projects = holders.setdefault(allocation.device_id, [])
        if allocation.project not in projects:
            projects.append(allocation.project)
    devices = Device.objects.select_related("node").exclude(health=Device.Health.RETIRED)
    if allocated_only or rule.project_id:
        devices = devices.filter(pk__in=list(holders))
    if rule.cluster_id:
        devices = devices.filter(node__cluster_id=rule.cluster_id)
    return {d.pk: (d, holders.get(d.pk, [])) for d in devices.order_by("pk")}


def _latest_rollups(device_ids, now: datetime) -> dict[int, Any]:
    latest: dict[int, Any] = {}
    rows = DeviceRollup.objects.filter(
        device_id__in=list(device_ids),
        partition="",
        resolution=Resolution.FIVE_MINUTES,
        window_start__gte=now - timedelta(seconds=FRESH_S),
        window_start__lte=now,
    ).order_by("device_id", "-window_start", "source")
    for row in rows:
        latest.setdefault(row.device_id, row)
    return latest


def _measure_utilization(rule: AlertRule, now: datetime) -> list[Observation]:
    devices = _scoped_devices(rule, allocated_only=True)
    latest = _latest_rollups(devices, now)
    out = []
    for pk, (device, projects) in devices.items():
        row = latest.get(pk)
        value = row.util_avg if row is not None else None
        out.append(
            Observation(
                f"device:{pk}",
                str(device),
                value,
                {**_device_params(device), "project": ", ".join(p.slug for p in projects)},
                projects[0] if len(projects) == 1 else None,
            )
        )
    return out


def _measure_temperature(rule: AlertRule, now: datetime) -> list[Observation]:
    devices = _scoped_devices(rule, allocated_only=False)
    latest = _latest_rollups(devices, now)
    out = []
    for pk, (device, projects) in devices.items():
        row = latest.get(pk)
        value = row.temp_max_c if row is not None else None
        project = projects[0] if len(projects) == 1 else None
        out.append(Observation(f"device:{pk}", str(device), value, _device_params(device), project))
    return out


def _error_count(row) -> int:
    deltas = row.error_deltas or {}
    health = row.health or {}
    counted = sum(float(deltas.get(k) or 0) for k in FAULT_COUNTERS)
    codes = len(health.get("xid") or []) + len(health.get("error_code") or [])
    return int(round(counted)) + codes


def _measure_errors(rule: AlertRule, now: datetime) -> list[Observation]:
    window = max(rule.duration_s, MIN_ERROR_WINDOW_S)
    devices = _scoped_devices(rule, allocated_only=False)
    counts: dict[int, int] = {}
    rows = DeviceRollup.objects.filter(
        device_id__in=list(devices),
        partition="",  # the whole card's counters (a MIG instance's rows would count them again)
        resolution=Resolution.FIVE_MINUTES,
        window_start__gte=now - timedelta(seconds=window),
        window_start__lte=now,
    ).only("device_id", "error_deltas", "health")
    for row in rows:
        counts[row.device_id] = counts.get(row.device_id, 0) + _error_count(row)
    out = []
    for pk, (device, projects) in devices.items():
        value = counts.get(pk)  # None: no measurement in the window
        params = {**_device_params(device), "minutes": window // 60}
        project = projects[0] if len(projects) == 1 else None
        out.append(Observation(f"device:{pk}", str(device), value, params, project))
    return out


def _measure_silence(rule: AlertRule, now: datetime) -> list[Observation]:
    devices = _scoped_devices(rule, allocated_only=False)
    last = dict(
        DeviceRollup.objects.filter(device_id__in=list(devices), last_sample_at__gte=now - SILENCE_LOOKBACK)
        .values("device_id")
        .annotate(last=Max("last_sample_at"))
        .values_list("device_id", "last")
    )
    out = []
    for pk, (device, projects) in devices.items():
        seen = last.get(pk)
        value = None if seen is None else max(0.0, (now - seen).total_seconds() / 60)
        project = projects[0] if len(projects) == 1 else None
        out.append(Observation(f"device:{pk}", str(device), value, _device_params(device), project))
    return out


def _measure_quotas(rule: AlertRule, now: datetime) -> list[Observation]:
    ctx = quota_context(now=now, per_job=False)
    quotas = Quota.objects.filter(project__isnull=False).select_related("project")
    if rule.project_id:
        quotas = quotas.filter(project_id=rule.project_id)
    out = []
    for quota in quotas.order_by("pk"):
        ceiling = quota.guaranteed_cu + (quota.borrowing_limit_cu or 0)
        if not ceiling:
            continue
        g, b = ctx.book.used(str(quota.pk))
        value = float((g + b) * 100 / ceiling)
        out.append(
            Observation(
                f"quota:{quota.pk}", quota.project.slug, value, {"project": quota.project.slug}, quota.project
            )
        )
    return out


def _measure_clusters(rule: AlertRule, now: datetime) -> list[Observation]:
    clusters = Cluster.objects.order_by("pk")
    if rule.cluster_id:
        clusters = clusters.filter(pk=rule.cluster_id)
    clusters = list(clusters)
    health = cluster_health([c.pk for c in clusters])
    out = []
    for cluster in clusters:
        h = health.get(cluster.pk)
        value = float(h.failures) if h is not None else 0.0
        out.append(Observation(f"cluster:{cluster.pk}", cluster.slug, value, {"cluster": cluster.slug}))
    return out


MEASURE: dict[str, Callable[[AlertRule, datetime], list[Observation]]] = {
    Kind.UTILIZATION_LOW: _measure_utilization,
    Kind.TEMPERATURE: _measure_temperature,
    Kind.DEVICE_ERRORS: _measure_errors,
    Kind.CARD_SILENT: _measure_silence,
    Kind.QUOTA_USED: _measure_quotas,
    Kind.CLUSTER_UNREACHABLE: _measure_clusters,
}


def alerts_evaluate(*, now: datetime | None = None) -> dict[str, int]:
    """Evaluate every enabled rule, each in a transaction of its own (a failing rule does not stop the
    others). Returns counts: rules, fired, resolved, deliveries, unknown (subjects without data)."""
    now = now or timezone.now()
    counts = {"rules": 0, "fired": 0, "resolved": 0, "deliveries": 0, "unknown": 0}
    for pk in AlertRule.objects.filter(enabled=True).order_by("pk").values_list("pk", flat=True):
        try:
            with transaction.atomic():
                rule = AlertRule.objects.select_for_update().filter(pk=pk, enabled=True).first()
                if rule is None:
                    continue
                rule_evaluate(rule, MEASURE[rule.kind](rule, now), now=now, counts=counts)
                counts["rules"] += 1
        except Exception:  # noqa: BLE001 - one broken rule must not silence the others
            log.exception("alert rule %s could not be evaluated", pk)
    return counts
