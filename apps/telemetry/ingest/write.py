"""The write path: ``samples_ingest`` and the one transaction that writes a batch."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from apps.core.audit import actor_fields
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, DeviceEvent
from apps.inventory.services.ledger.events import device_events_create
from apps.jobs.models import Allocation
from apps.telemetry.attribution import _attribute
from apps.telemetry.health_events import _health_events
from apps.telemetry.ingest.devices import DeviceResolver, _describe
from apps.telemetry.ingest.report import IngestReport
from apps.telemetry.models import DeviceRollup, Quality
from apps.telemetry.rollups import (
    _agg_from_row,
    _aggregate,
    _health_flags,
    _rebuild_hours,
    _RollupRow,
    _rollups_upsert,
    _row,
    fleet_rollups_rebuild,
)
from apps.telemetry.samples import (
    COUNTER_MAX,
    TEMPERATURE_RANGE,
    UTILIZATION_RANGE,
    Sample,
    memory_cap_mib,
    plausible,
    power_cap_w,
)
from apps.telemetry.windows import HOUR_S, WINDOW_S, _dt, _ts, _when, setting


def samples_ingest(
    *,
    samples: Iterable[Sample],
    source: str,
    quality: str = Quality.EXACT,
    scrape_interval_s: int | None = None,
    cluster: Cluster | None = None,
    actor: Any = "system",
    now: datetime | None = None,
    dry_run: bool = False,
    report: IngestReport | None = None,
) -> IngestReport:
    """Aggregate samples into rollups (one transaction); attribute windows to jobs; raise health events.

    ``source`` names where the samples came from (it is part of each rollup's key: two sources never
    overwrite each other). ``quality`` is "exact" for measured exporter data and "estimated" for
    synthetic / derived data. Samples for devices not in the ledger (of ``cluster`` when given), in the
    future beyond the allowed clock skew, older than the 5-minute retention, or repeated, are skipped
    and counted by reason in the returned report.
    """
    if quality not in Quality.values:
        raise ValidationFailed(f"Unknown quality {quality!r}.", details={"quality": list(Quality.values)})
    if not source or len(source) > 200:
        raise ValidationFailed("Name the source (1-200 characters).", details={"source": ["required"]})
    now = now or timezone.now()
    report = report or IngestReport(source=source)
    report.source, report.dry_run = source, dry_run
    now_ts = now.timestamp()
    latest = now_ts + setting("TELEMETRY_MAX_CLOCK_SKEW_S", 300)
    earliest = now_ts - setting("TELEMETRY_ROLLUP_RETENTION_DAYS", 14) * 86400
    resolver = DeviceResolver(cluster=cluster)
    resolve = resolver.resolve
    limits = resolver.limits
    unknown_limits = (memory_cap_mib(), power_cap_w(None))
    t_low, t_high = TEMPERATURE_RANGE
    u_low, u_high = UTILIZATION_RANGE
    known = resolver.node_of
    # (device, partition, 5-minute window) → {sample time: sample}; a time seen twice is a duplicate.
    groups: dict[tuple[int, str, float], dict[float, Sample]] = {}
    received = 0
    vendors: set[str] = set(report.vendors)
    for s in samples:
        received += 1
        at = s.at if s.at.__class__ is float else _ts(s.at)
        dev = s.device_id
        if dev is None:
            dev = resolve(s)
        elif dev not in known:
            dev = None
        if dev is None:
            report.skip("device_not_in_ledger", _describe(s))
            continue
        if not earliest <= at <= latest:  # NaN and ±Inf fail it too
            if not math.isfinite(at):
                report.skip("bad_timestamp", f"{_describe(s)} at {at!r}")
            elif at > latest:
                report.skip("clock_skew_future", f"{_describe(s)} at {_when(at)}")
            else:
                report.skip("older_than_retention", f"{_describe(s)} at {_when(at)}")
            continue
        gkey = (dev, s.partition, at - at % WINDOW_S)
        bucket = groups.get(gkey)
        if bucket is None:
            bucket = groups[gkey] = {}
        elif at in bucket:
            report.skip("duplicate_sample", f"{_describe(s)} at {_when(at)}")
            continue
        # Physics before rollups: a value no card can produce is dropped and counted, never averaged.
        memory_cap, power_cap = limits.get(dev, unknown_limits)
        # The common case inline (every value present is finite and in range: NaN and ±Inf fail every
        # comparison); anything else goes through ``plausible``, which names what it drops.
        u, m, mt, t, p, c = (
            s.utilization_pct,
            s.memory_used_mib,
            s.memory_total_mib,
            s.temperature_c,
            s.power_w,
            s.counters,
        )
        if not (
            (u is None or u_low <= u <= u_high)
            and (m is None or 0.0 <= m <= memory_cap)
            and (mt is None or 0.0 <= mt <= memory_cap)
            and (t is None or t_low <= t <= t_high)
            and (p is None or 0.0 <= p <= power_cap)
            and (not c or _counters_in_range(c))
        ):
            s, implausible = plausible(s, memory_cap=memory_cap, power_cap=power_cap)
            for reason, text in implausible:
                report.skip(reason, f"{_describe(s)} from {source}: {text}")
        if s.vendor:
            vendors.add(s.vendor)
        bucket[at] = s
    report.received += received
    report.vendors = sorted(vendors)
    if not groups:
        return report
    windows = sorted({k[2] for k in groups})
    report.window_start, report.window_end = _dt(windows[0]), _dt(windows[-1] + WINDOW_S)
    if dry_run:
        report.used += sum(len(v) for v in groups.values())
        report.rollups_written = len(groups)
        return report
    with transaction.atomic():
        _write(
            groups,
            windows,
            resolver,
            report,
            source=source,
            quality=quality,
            interval=scrape_interval_s,
            actor=actor,
            now=now,
        )
    return report


def _counters_in_range(counters: dict[str, float]) -> bool:
    # A plain loop, not all(<generator>): this runs once per sample.
    for v in counters.values():  # noqa: SIM110
        if not 0.0 <= v <= COUNTER_MAX:
            return False
    return True


def _counter_baselines(groups, windows, source: str) -> dict[tuple[int, str], dict[str, float]]:
    """Counter baselines: the latest stored window before this batch, per device and partition (of the
    devices with counters in the batch)."""
    with_counters = sorted({k[0] for k, items in groups.items() if any(s.counters for s in items.values())})
    running: dict[tuple[int, str], dict[str, float]] = {}
    if not with_counters:
        return running
    for row in (
        DeviceRollup.objects.filter(
            source=source,
            resolution=WINDOW_S,
            device_id__in=with_counters,
            window_start__lt=_dt(windows[0]),
        )
        # The latest row per (device, partition): a window function, not DISTINCT ON (PostgreSQL
        # only; the demo runs on SQLite). Django filters on it through a subquery.
        .annotate(
            latest=Window(
                RowNumber(), partition_by=[F("device_id"), F("partition")], order_by=F("window_start").desc()
            )
        )
        .filter(latest=1)
        .values("device_id", "partition", "counters_last")
    ):
        running[(row["device_id"], row["partition"])] = row["counters_last"] or {}
    return running


def _write(groups, windows, resolver, report: IngestReport, *, source, quality, interval, actor, now) -> None:
    device_ids = sorted({k[0] for k in groups})
    # The stored windows this batch meets, locked (primary-key order); only what the comparison needs
    # is read, the whole row only where later samples are merged into it.
    existing: dict[tuple[int, str, float], tuple] = {
        (dev, partition, start.timestamp()): (pk, first.timestamp(), last.timestamp(), counters, health)
        for pk, dev, partition, start, first, last, counters, health in DeviceRollup.objects.select_for_update()
        .filter(
            source=source,
            resolution=WINDOW_S,
            device_id__in=device_ids,
            window_start__gte=_dt(windows[0]),
            window_start__lte=_dt(windows[-1]),
        )
        .order_by("pk")
        .values_list(
            "pk",
            "device_id",
            "partition",
            "window_start",
            "first_sample_at",
            "last_sample_at",
            "counters_last",
            "health",
        )
    }
    running = _counter_baselines(groups, windows, source)
    temp_limit = float(setting("TELEMETRY_TEMP_LIMIT_C", 90))
    rows: list[_RollupRow] = []
    written: dict[tuple[int, str, float], _RollupRow] = {}
    pods_by_device: dict[int, set[tuple[str, str]]] = defaultdict(set)
    seen_at: dict[int, float] = {}
    events: list[DeviceEvent] = []
    label = actor_fields(actor)["actor_label"]
    used = 0
    for key in sorted(groups):
        dev, partition, window = key
        # Times are unique within a window (duplicates were dropped), so tuples sort by time alone.
        items = sorted(groups[key].items())
        old = existing.get(key)
        pair = (dev, partition)
        if old is None or (items[0][0] <= old[1] and items[-1][0] >= old[2]):
            agg = _aggregate(items, running.get(pair, {}))
            used += len(items)
        else:
            first, last = old[1], old[2]
            fresh = [item for item in items if not (first <= item[0] <= last)]
            dropped = len(items) - len(fresh)
            if dropped:
                report.skip(
                    "already_ingested", f"device {dev} {partition} window {_dt(window).isoformat()}", dropped
                )
            if not fresh:
                running[pair] = dict(old[3] or {})
                continue
            later = [item for item in fresh if item[0] > last]
            earlier = [item for item in fresh if item[0] < first]
            agg = _agg_from_row(DeviceRollup.objects.get(pk=old[0]))
            if later:
                agg = _aggregate(later, agg.counters_last, agg)
            if earlier:
                baseline = agg.counters_last
                stripped = [(at, _without_counters(s)) for at, s in earlier]
                agg = _aggregate(stripped, baseline, agg)
            used += len(fresh)
        report.counter_resets += agg.resets
        running[pair] = agg.counters_last
        health = _health_flags(agg, temp_limit)
        before = (old[4] or {}) if old else {}
        events.extend(
            _health_events(dev, resolver.node_of[dev], partition, window, health, before, source, label)
        )
        row = _row(dev, partition, WINDOW_S, window, source, quality, interval, agg, health, now)
        rows.append(row)
        written[key] = row
        if agg.pods:
            pods_by_device[dev].update(agg.pods)
        if seen_at.get(dev, -math.inf) < agg.last:
            seen_at[dev] = agg.last
    report.used += used
    _rollups_upsert(rows)
    report.rollups_written += len(rows)
    if events:
        device_events_create(events)
        report.events_raised += len(events)
        from apps.scheduling.faults import device_fault_events

        # A critical event on one card cordons that card and retries its job (faults.py: proportion).
        device_fault_events(events, actor=actor)
    touched = {(k[0], k[1]) for k in groups}
    hours = sorted({w - w % HOUR_S for w in windows})
    if pods_by_device:
        # Before attribution: utilization and bills follow the card the pod really runs on.
        _placement_readback(pods_by_device, seen_at, report, label=label, source=source, before=hours[0])
    _rebuild_hours(touched, hours, source=source, report=report, now=now, written=written)
    nodes = sorted({resolver.node_of[dev] for dev, _ in touched})
    fleet_rollups_rebuild(
        source=source, resolution=WINDOW_S, windows=[_dt(w) for w in windows], node_ids=nodes
    )
    fleet_rollups_rebuild(source=source, resolution=HOUR_S, windows=[_dt(h) for h in hours], node_ids=nodes)


def _placement_readback(
    pods_by_device: dict[int, set[tuple[str, str]]],
    seen_at: dict[int, float],
    report: IngestReport,
    *,
    label: str,
    source: str,
    before: float,
) -> None:
    """Exporter pod labels vs allocations (``readback``); a moved allocation's earlier windows of this
    source are attributed again on both cards, so its whole history follows the real card."""
    from apps.telemetry.readback import readback

    result = readback(pods_by_device=pods_by_device, seen_at=seen_at, actor_label=label)
    report.placements_moved += len(result.moved)
    report.placement_conflicts += len(result.conflicts)
    report.events_raised += result.events
    if not result.moved:
        return
    cut = _dt(before)
    started = dict(
        Allocation.objects.filter(pk__in=[m["allocation"] for m in result.moved]).values_list(
            "pk", "started_at"
        )
    )
    for move in result.moved:
        start_ts = started[move["allocation"]].timestamp()
        start = _dt(start_ts - start_ts % WINDOW_S)
        if start >= cut:
            continue
        device_ids = sorted({move["from_device"], move["to_device"]})
        rows = list(
            DeviceRollup.objects.filter(
                source=source,
                resolution=WINDOW_S,
                device_id__in=device_ids,
                window_start__gte=start,
                window_start__lt=cut,
            ).order_by("device_id", "partition", "window_start")
        )
        report.attributions_written += _attribute(rows, device_ids, start, cut, source=source)


def _without_counters(s: Sample) -> Sample:
    if not s.counters:
        return s
    copy = Sample(**{name: getattr(s, name) for name in Sample.__slots__})
    copy.counters = None
    return copy
