"""Telemetry writes: samples → 5-minute and hourly rollups, job attribution, health events, retention.

``samples_ingest`` is the one write path. Whatever the origin (an exporter scrape, a Prometheus
range query, the simulated cluster backend), samples are aggregated in memory per
(device, partition, 5-minute window) and written with one bulk upsert inside one transaction, so a
failed ingest writes nothing. Re-ingesting samples already in a window changes nothing:
a batch that covers a stored window's first and last sample replaces it (a re-queried window);
samples inside a stored window's time span are skipped as ``already_ingested``; later samples are
merged into it. Counter increases follow Prometheus' ``increase()``: a drop is a reset and the new
value counts from zero.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import ApplicationError, ParseFailed, ValidationFailed
from apps.core.models import BackgroundRun
from apps.core.stored_text import stored
from apps.inventory.models import Cluster, Device, DeviceEvent
from apps.jobs.models import Allocation
from apps.telemetry import exposition
from apps.telemetry.models import DeviceRollup, FleetRollup, JobUtilization, MetricSource, Quality
from apps.telemetry.samples import (
    COUNTER_MAX,
    TEMPERATURE_RANGE,
    UTILIZATION_RANGE,
    Conversion,
    Sample,
    memory_cap_mib,
    plausible,
    power_cap_w,
    series_to_samples,
)

WINDOW_S = 300
MAX_REJECTED_LINES = 200  # lines named one by one in an ingest report (all are counted)
HOUR_S = 3600
_POD_JOB = re.compile(r"^suanchi-(\d+)(?:-a\d+)?(?:-|$)")

_ROLLUP_UPDATE_FIELDS = [
    "quality",
    "scrape_interval_s",
    "sample_count",
    "first_sample_at",
    "last_sample_at",
    "util_sum",
    "util_n",
    "util_avg",
    "util_max",
    "mem_used_sum",
    "mem_used_n",
    "mem_used_avg_mib",
    "mem_used_max_mib",
    "mem_total_mib",
    "temp_max_c",
    "power_sum",
    "power_n",
    "power_avg_w",
    "error_deltas",
    "counters_last",
    "health",
    "pods",
    "updated_at",
]
_UNIQUE = ["device", "partition", "resolution", "window_start", "source"]
# Counters whose increase is a hardware fault (an event); others are only recorded.
FAULT_COUNTERS = ("ecc_dbe", "ecc_uncorrectable", "uncorrectable_remapped_rows")


def setting(name: str, default: Any) -> Any:
    return settings.SUANCHI.get(name, default)


def _ts(value: datetime | float) -> float:
    return value if isinstance(value, float | int) else value.timestamp()


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _when(ts: float) -> str:
    """``ts`` as ISO 8601 for a skip example; a value no datetime can hold is shown as a number."""
    try:
        return _dt(ts).isoformat()
    except (OverflowError, OSError, ValueError):
        return f"{ts:g} s since the epoch"


@dataclass
class IngestReport:
    """What an ingest did. ``received`` / ``used`` count normalized samples (one device or partition
    instance at one instant); ``skipped`` counts by reason — exposition-level reasons
    (``malformed_line``, ``unknown_family``, ``unused_family``, ``unused_series``, ``not_a_number``,
    ``not_supported``, ``no_device_identity``, ``unknown_vendor_brand``) count lines / series, sample-level reasons (``device_not_in_ledger``,
    ``clock_skew_future``, ``older_than_retention``, ``duplicate_sample``, ``already_ingested``,
    ``bad_timestamp``) count samples, and physically impossible values (``implausible_utilization``,
    ``implausible_memory``, ``implausible_temperature``, ``implausible_power``, ``implausible_counter``)
    count values dropped from otherwise used samples. ``examples`` keeps up to five examples per
    reason; ``rejected_lines`` names every skipped line of an exposition page (number, reason)."""

    source: str
    dry_run: bool = False
    received: int = 0
    used: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    counter_resets: int = 0
    rollups_written: int = 0
    hourly_written: int = 0
    attributions_written: int = 0
    events_raised: int = 0
    # Read-back of the cards pods really run on (exporter pod labels vs allocations).
    placements_moved: int = 0
    placement_conflicts: int = 0
    vendors: list[str] = field(default_factory=list)
    window_start: datetime | None = None
    window_end: datetime | None = None
    rejected_lines: list[tuple[int, str]] = field(default_factory=list)

    def skip(self, reason: str, example: str, count: int = 1) -> None:
        self.skipped[reason] += count
        if len(self.examples[reason]) < 5 and example not in self.examples[reason]:
            self.examples[reason].append(example)

    def absorb(self, conversion: Conversion) -> None:
        for reason, count in conversion.skipped.items():
            self.skipped[reason] += count
            for ex in conversion.examples.get(reason, []):
                if len(self.examples[reason]) < 5 and ex not in self.examples[reason]:
                    self.examples[reason].append(ex)
        self.vendors = sorted(set(self.vendors) | set(conversion.vendors))

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dry_run": self.dry_run,
            "vendors": self.vendors,
            "received": self.received,
            "used": self.used,
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_total": sum(self.skipped.values()),
            "examples": {k: v for k, v in sorted(self.examples.items()) if v},
            "counter_resets": self.counter_resets,
            "rollups_written": self.rollups_written,
            "hourly_written": self.hourly_written,
            "attributions_written": self.attributions_written,
            "events_raised": self.events_raised,
            "placements_moved": self.placements_moved,
            "placement_conflicts": self.placement_conflicts,
            "window_start": self.window_start.isoformat() if self.window_start else None,
            "window_end": self.window_end.isoformat() if self.window_end else None,
            "rejected_lines": [
                {"line": line, "reason": reason} for line, reason in self.rejected_lines[:MAX_REJECTED_LINES]
            ],
        }


# ---------------------------------------------------------------------------------------------------
# Device matching
# ---------------------------------------------------------------------------------------------------


class DeviceResolver:
    """Ledger devices by UUID, serial, (node, PCIe bus id) or (node, vendor, index); retired cards never match."""

    def __init__(self, *, cluster: Cluster | None = None) -> None:
        qs = Device.objects.exclude(health=Device.Health.RETIRED)
        if cluster is not None:
            qs = qs.filter(node__cluster=cluster)
        rows = list(
            qs.values_list(
                "pk",
                "uuid",
                "serial",
                "pci_bus_id",
                "index",
                "vendor",
                "node__name",
                "node_id",
                "health",
                "memory_mib",
                "device_model__memory_mib",
                "device_model__tdp_w",
            )
        )
        # Lost cards first, so a live card in the same slot wins.
        rows.sort(key=lambda r: r[8] != Device.Health.LOST)
        self.node_of: dict[int, int] = {}
        # Per card: (memory cap MiB, power cap W) that its readings must stay within.
        self.limits: dict[int, tuple[float, float]] = {
            r[0]: (memory_cap_mib(r[9], r[10]), power_cap_w(r[11])) for r in rows
        }
        self.by_uuid: dict[str, int] = {}
        self.by_serial: dict[str, int] = {}
        self.by_pci: dict[tuple[str, str], int] = {}
        self.by_index: dict[tuple[str, str, int], int] = {}
        for pk, uuid, serial, pci, index, vendor, node, node_id, *_rest in rows:
            self.node_of[pk] = node_id
            if uuid:
                self.by_uuid[uuid] = pk
            if serial:
                self.by_serial[serial] = pk
            if pci:
                self.by_pci[(node, pci.upper())] = pk
            self.by_index[(node, vendor, index)] = pk

    def resolve(self, s: Sample) -> int | None:
        if s.device_id is not None:
            return s.device_id if s.device_id in self.node_of else None
        if s.uuid and s.uuid in self.by_uuid:
            return self.by_uuid[s.uuid]
        if s.serial and s.serial in self.by_serial:
            return self.by_serial[s.serial]
        if s.node:
            if s.pci_bus_id and (s.node, s.pci_bus_id) in self.by_pci:
                return self.by_pci[(s.node, s.pci_bus_id)]
            if s.index is not None and s.vendor:
                return self.by_index.get((s.node, s.vendor, s.index))
        return None


def _describe(s: Sample) -> str:
    parts = [
        f"{k}={v}"
        for k, v in (
            ("device_id", s.device_id),
            ("uuid", s.uuid),
            ("serial", s.serial),
            ("pci", s.pci_bus_id),
            ("node", s.node),
            ("index", s.index),
        )
        if v is not None
    ]
    return " ".join(parts) or "(no identity)"


# ---------------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Agg:
    count: int = 0
    first: float = 0.0
    last: float = 0.0
    util_sum: float = 0.0
    util_n: int = 0
    util_max: float | None = None
    mem_sum: float = 0.0
    mem_n: int = 0
    mem_max: float | None = None
    mem_total: float | None = None
    temp_max: float | None = None
    power_sum: float = 0.0
    power_n: int = 0
    error_deltas: dict[str, float] = field(default_factory=dict)
    counters_last: dict[str, float] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    pods: set[tuple[str, str]] = field(default_factory=set)
    resets: int = 0


def _aggregate(
    items: Sequence[tuple[float, Sample]], baseline: dict[str, float], agg: _Agg | None = None
) -> _Agg:
    """Fold samples (sorted by time) into ``agg`` (a fresh one when None), counters continuing from ``baseline``."""
    a = agg or _Agg(first=items[0][0], last=items[0][0])
    last_counters = dict(baseline)
    # Sorted by time: the first and last items bound the span.
    first, last = min(a.first, items[0][0]), max(a.last, items[-1][0])
    util_sum, util_n, util_max = a.util_sum, a.util_n, a.util_max
    mem_sum, mem_n, mem_max, mem_total = a.mem_sum, a.mem_n, a.mem_max, a.mem_total
    temp_max, power_sum, power_n = a.temp_max, a.power_sum, a.power_n
    for _at, s in items:
        u = s.utilization_pct
        if u is not None:
            util_sum += u
            util_n += 1
            if util_max is None or u > util_max:
                util_max = u
        m = s.memory_used_mib
        if m is not None:
            mem_sum += m
            mem_n += 1
            if mem_max is None or m > mem_max:
                mem_max = m
        if s.memory_total_mib is not None:
            mem_total = s.memory_total_mib
        t = s.temperature_c
        if t is not None and (temp_max is None or t > temp_max):
            temp_max = t
        p = s.power_w
        if p is not None:
            power_sum += p
            power_n += 1
        if s.counters:
            for name, value in s.counters.items():
                prev = last_counters.get(name)
                if prev is None:
                    delta = 0.0  # first sight: no baseline to count from
                elif value >= prev:
                    delta = value - prev
                else:
                    delta = value  # reset: the counter restarted from zero
                    a.resets += 1
                a.error_deltas[name] = a.error_deltas.get(name, 0.0) + delta
                last_counters[name] = value
        if s.health:
            for key, value in s.health.items():
                if isinstance(value, list):
                    known = a.health.setdefault(key, [])
                    known.extend(v for v in value if v not in known)
                elif key == "health" and a.health.get("health") != "unhealthy":
                    a.health["health"] = value
        if s.pod:
            a.pods.add((s.namespace or "", s.pod))
        if s.pods:
            a.pods.update((ns or "", pod or "") for ns, pod in s.pods if pod)
    a.count += len(items)
    a.first, a.last = first, last
    a.util_sum, a.util_n, a.util_max = util_sum, util_n, util_max
    a.mem_sum, a.mem_n, a.mem_max, a.mem_total = mem_sum, mem_n, mem_max, mem_total
    a.temp_max, a.power_sum, a.power_n = temp_max, power_sum, power_n
    a.counters_last = last_counters
    return a


def _agg_from_row(row: DeviceRollup) -> _Agg:
    return _Agg(
        count=row.sample_count,
        first=row.first_sample_at.timestamp(),
        last=row.last_sample_at.timestamp(),
        util_sum=row.util_sum,
        util_n=row.util_n,
        util_max=row.util_max,
        mem_sum=row.mem_used_sum,
        mem_n=row.mem_used_n,
        mem_max=row.mem_used_max_mib,
        mem_total=row.mem_total_mib,
        temp_max=row.temp_max_c,
        power_sum=row.power_sum,
        power_n=row.power_n,
        error_deltas=dict(row.error_deltas or {}),
        counters_last=dict(row.counters_last or {}),
        health={k: (list(v) if isinstance(v, list) else v) for k, v in (row.health or {}).items()},
        pods={(p.get("namespace", ""), p.get("pod", "")) for p in (row.pods or [])},
    )


def _health_flags(a: _Agg, temp_limit: float) -> dict[str, Any]:
    health = {k: (sorted(v, key=str) if isinstance(v, list) else v) for k, v in a.health.items() if v}
    if a.temp_max is not None and a.temp_max >= temp_limit:
        health["temp_over"] = temp_limit
    faults = {k: a.error_deltas[k] for k in FAULT_COUNTERS if a.error_deltas.get(k)}
    if faults:
        health["faults"] = faults
    return health


@dataclass(slots=True)
class _RollupRow:
    """One rollup row as written (the fields of ``DeviceRollup`` by the same names, no model instance):
    the hourly rebuild and the attribution read the rows of this batch from here, not back from the
    database. ``DeviceRollup`` instances read from the database answer to the same attribute names."""

    device_id: int
    partition: str
    resolution: int
    window_start: datetime
    source: str
    quality: str
    scrape_interval_s: int | None
    sample_count: int
    first_sample_at: datetime
    last_sample_at: datetime
    util_sum: float
    util_n: int
    util_avg: float | None
    util_max: float | None
    mem_used_sum: float
    mem_used_n: int
    mem_used_avg_mib: float | None
    mem_used_max_mib: float | None
    mem_total_mib: float | None
    temp_max_c: float | None
    power_sum: float
    power_n: int
    power_avg_w: float | None
    error_deltas: dict
    counters_last: dict
    health: dict
    pods: list
    updated_at: datetime


# Column order of ``_RollupRow`` = the columns written (``device_id`` is the FK column).
_ROW_COLUMNS = tuple(_RollupRow.__slots__)
_JSON_COLUMNS = frozenset({"error_deltas", "counters_last", "health", "pods"})


def _row(
    device_id: int,
    partition: str,
    resolution: int,
    window: float,
    source: str,
    quality: str,
    interval: int | None,
    a: _Agg,
    health: dict,
    now: datetime,
) -> _RollupRow:
    return _RollupRow(
        device_id,
        partition,
        resolution,
        _dt(window),
        source,
        quality,
        interval,
        a.count,
        _dt(a.first),
        _dt(a.last),
        a.util_sum,
        a.util_n,
        (a.util_sum / a.util_n) if a.util_n else None,
        a.util_max,
        a.mem_sum,
        a.mem_n,
        (a.mem_sum / a.mem_n) if a.mem_n else None,
        a.mem_max,
        a.mem_total,
        a.temp_max,
        a.power_sum,
        a.power_n,
        (a.power_sum / a.power_n) if a.power_n else None,
        dict(sorted(a.error_deltas.items())),
        a.counters_last,
        health,
        [{"namespace": ns, "pod": pod} for ns, pod in sorted(a.pods)] if a.pods else [],
        now,
    )


_UPSERT_STAGE = "suanchi_rollup_stage"
_COLUMNS_SQL = ", ".join(_ROW_COLUMNS)
# Every identifier below is a constant of this module or the model's table name, never input.
_STAGE_SQL = (
    f"CREATE TEMP TABLE IF NOT EXISTS {_UPSERT_STAGE} ON COMMIT DELETE ROWS AS "  # noqa: S608
    f"SELECT {_COLUMNS_SQL} FROM {DeviceRollup._meta.db_table} WITH NO DATA"
)
_UPSERT_SQL = (
    f"INSERT INTO {DeviceRollup._meta.db_table} ({_COLUMNS_SQL}) "  # noqa: S608
    f"SELECT {_COLUMNS_SQL} FROM {_UPSERT_STAGE} "
    "ORDER BY device_id, partition, resolution, window_start, source "
    "ON CONFLICT (device_id, partition, resolution, window_start, source) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in _ROW_COLUMNS if c in _ROLLUP_UPDATE_FIELDS)
)


def _rollups_upsert(rows: list[_RollupRow]) -> None:
    """Insert or update rollup rows by their natural key, PostgreSQL's fast way: ``COPY`` the rows
    into a session-local staging table, then one ``INSERT … SELECT … ON CONFLICT DO UPDATE`` (the same
    outcome as ``bulk_create(update_conflicts=True)`` without building a model instance and a bound
    parameter per value). https://www.postgresql.org/docs/current/sql-copy.html,
    https://www.postgresql.org/docs/current/sql-insert.html#SQL-ON-CONFLICT"""
    if not rows:
        return
    import json

    from django.db import connection

    if connection.vendor != "postgresql":
        # The SQLite demo: the same upsert through the ORM (SQLite has ON CONFLICT but neither COPY
        # nor the temporary-table form used below).
        DeviceRollup.objects.bulk_create(
            [DeviceRollup(**{name: getattr(r, name) for name in _ROW_COLUMNS}) for r in rows],
            batch_size=500,
            update_conflicts=True,
            unique_fields=_UNIQUE,
            update_fields=_ROLLUP_UPDATE_FIELDS,
        )
        return
    dumps = json.dumps
    json_at = [i for i, name in enumerate(_ROW_COLUMNS) if name in _JSON_COLUMNS]
    # wrap_database_errors: psycopg's errors inside COPY surface as Django's (DataError, IntegrityError).
    with connection.cursor() as cursor, connection.wrap_database_errors:
        # ON COMMIT DELETE ROWS: the stage is empty at the start of every transaction; TRUNCATE covers
        # a second upsert inside the same one (5-minute rows, then hourly rows).
        cursor.execute(_STAGE_SQL)
        cursor.execute(f"TRUNCATE {_UPSERT_STAGE}")
        with cursor.copy(f"COPY {_UPSERT_STAGE} ({_COLUMNS_SQL}) FROM STDIN") as copy:
            write = copy.write_row
            for r in rows:
                values = [getattr(r, name) for name in _ROW_COLUMNS]
                # JSON as text (the server parses it into jsonb); empty values are constants.
                for i in json_at:
                    v = values[i]
                    values[i] = dumps(v) if v else ("[]" if v.__class__ is list else "{}")
                write(values)
        cursor.execute(_UPSERT_SQL)


# ---------------------------------------------------------------------------------------------------
# The write path
# ---------------------------------------------------------------------------------------------------


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
    # Counter baselines: the latest stored window before this batch, per device and partition.
    with_counters = sorted({k[0] for k, items in groups.items() if any(s.counters for s in items.values())})
    running: dict[tuple[int, str], dict[str, float]] = {}
    if with_counters:
        for row in (
            DeviceRollup.objects.filter(
                source=source,
                resolution=WINDOW_S,
                device_id__in=with_counters,
                window_start__lt=_dt(windows[0]),
            )
            .order_by("device_id", "partition", "-window_start")
            .distinct("device_id", "partition")
            .values("device_id", "partition", "counters_last")
        ):
            running[(row["device_id"], row["partition"])] = row["counters_last"] or {}
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
        DeviceEvent.objects.bulk_create(events)
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


# Health events from telemetry, stored in English and shown in the reader's language
# (apps.core.stored_text): the frame, with or without the partition (a MIG instance), and each finding.
HEALTH_EVENT = stored("telemetry: %(finding)s in the window from %(when)s [%(source)s]")
HEALTH_EVENT_PARTITION = stored(
    "telemetry (%(partition)s): %(finding)s in the window from %(when)s [%(source)s]"
)
FINDING_XID = stored("XID %(codes)s")
FINDING_FAULT_CODE = stored("fault code %(codes)s")
FINDING_UNHEALTHY = stored("exporter reports the device unhealthy")
FINDING_COUNTERS = stored("uncorrectable error counters rose (%(counters)s)")
FINDING_TEMPERATURE = stored("temperature reached the %(limit)s °C limit")


def _health_events(
    dev: int, node_id: int, partition: str, window: float, health: dict, before: dict, source: str, label: str
) -> list[DeviceEvent]:
    if not health:
        return []  # nothing to report (and nothing to format) in a quiet window
    frame = HEALTH_EVENT_PARTITION if partition else HEALTH_EVENT
    when = _dt(window).strftime("%Y-%m-%d %H:%M UTC")
    out = []

    def add(severity: str, message: str, after: dict) -> None:
        out.append(
            DeviceEvent(
                node_id=node_id,
                device_id=dev,
                kind=DeviceEvent.Kind.HEALTH_CHANGED,
                severity=severity,
                message=(
                    frame % {"partition": partition, "finding": message, "when": when, "source": source}
                )[:500],
                after={"telemetry": after},
                actor_label=label,
            )
        )

    new_xid = [x for x in health.get("xid", []) if x not in before.get("xid", [])]
    if new_xid:
        add(
            DeviceEvent.Severity.CRITICAL,
            FINDING_XID % {"codes": ", ".join(map(str, new_xid))},
            {"xid": new_xid},
        )
    new_codes = [c for c in health.get("error_code", []) if c not in before.get("error_code", [])]
    if new_codes:
        add(
            DeviceEvent.Severity.CRITICAL,
            FINDING_FAULT_CODE % {"codes": ", ".join(new_codes)},
            {"error_code": new_codes},
        )
    if health.get("health") == "unhealthy" and before.get("health") != "unhealthy":
        add(DeviceEvent.Severity.CRITICAL, FINDING_UNHEALTHY, {"health": "unhealthy"})
    faults = health.get("faults", {})
    old_faults = before.get("faults", {})
    grown = {k: v for k, v in faults.items() if v > old_faults.get(k, 0)}
    if grown:
        text = ", ".join(f"{k} +{v:g}" for k, v in sorted(grown.items()))
        add(DeviceEvent.Severity.CRITICAL, FINDING_COUNTERS % {"counters": text}, {"faults": grown})
    if "temp_over" in health and "temp_over" not in before:
        add(
            DeviceEvent.Severity.WARNING,
            FINDING_TEMPERATURE % {"limit": f"{health['temp_over']:g}"},
            {"temp_over": health["temp_over"]},
        )
    return out


def _rebuild_hours(
    touched: set[tuple[int, str]],
    hours: list[float],
    *,
    source: str,
    report: IngestReport,
    now: datetime,
    written: dict[tuple[int, str, float], _RollupRow] | None = None,
) -> None:
    """Hourly rows = Σ of their 5-minute rows (recomputed, so idempotent); then job attribution.

    ``written``: the 5-minute rows this batch just wrote (by device, partition, window start); only the
    other 5-minute rows of the touched hours are read from the database."""
    written = written or {}
    device_ids = sorted({d for d, _ in touched})
    start, end = _dt(hours[0]), _dt(hours[-1] + HOUR_S)
    # Windows in which every touched (device, partition) was just written need no read-back.
    full = [w for w in {k[2] for k in written} if all((d, p, w) in written for d, p in touched)]
    stored = DeviceRollup.objects.filter(
        source=source,
        resolution=WINDOW_S,
        device_id__in=device_ids,
        window_start__gte=start,
        window_start__lt=end,
    )
    if full:
        stored = stored.exclude(window_start__in=[_dt(w) for w in full])
    keyed: dict[tuple[int, str, float], Any] = dict(written)
    for r in stored:
        key = (r.device_id, r.partition, r.window_start.timestamp())
        if key not in keyed:
            keyed[key] = r
    hour_set = set(hours)
    five = []
    buckets: dict[tuple[int, str, float], list[Any]] = defaultdict(list)
    for key in sorted(keyed):
        dev, partition, w = key
        if (dev, partition) not in touched:
            continue
        r = keyed[key]
        five.append(r)
        h = w - w % HOUR_S
        if h in hour_set:
            buckets[(dev, partition, h)].append(r)
    hourly = []
    for (dev, partition, h), parts in buckets.items():
        a = _Agg(first=parts[0].first_sample_at.timestamp(), last=parts[-1].last_sample_at.timestamp())
        health: dict[str, Any] = {}
        for r in parts:
            a.count += r.sample_count
            a.first = min(a.first, r.first_sample_at.timestamp())
            a.last = max(a.last, r.last_sample_at.timestamp())
            a.util_sum += r.util_sum
            a.util_n += r.util_n
            if r.util_max is not None and (a.util_max is None or r.util_max > a.util_max):
                a.util_max = r.util_max
            a.mem_sum += r.mem_used_sum
            a.mem_n += r.mem_used_n
            if r.mem_used_max_mib is not None and (a.mem_max is None or r.mem_used_max_mib > a.mem_max):
                a.mem_max = r.mem_used_max_mib
            if r.mem_total_mib is not None:
                a.mem_total = r.mem_total_mib
            if r.temp_max_c is not None and (a.temp_max is None or r.temp_max_c > a.temp_max):
                a.temp_max = r.temp_max_c
            a.power_sum += r.power_sum
            a.power_n += r.power_n
            for k, v in (r.error_deltas or {}).items():
                a.error_deltas[k] = a.error_deltas.get(k, 0.0) + v
            a.counters_last = r.counters_last or a.counters_last
            for k, v in (r.health or {}).items():
                if isinstance(v, list):
                    known = health.setdefault(k, [])
                    known.extend(x for x in v if x not in known)
                elif isinstance(v, dict):
                    merged = health.setdefault(k, {})
                    for kk, vv in v.items():
                        merged[kk] = merged.get(kk, 0) + vv
                else:
                    health[k] = v
            a.pods.update((p.get("namespace", ""), p.get("pod", "")) for p in (r.pods or []))
        quality = Quality.ESTIMATED if any(r.quality == Quality.ESTIMATED for r in parts) else Quality.EXACT
        hourly.append(
            _row(dev, partition, HOUR_S, h, source, quality, parts[0].scrape_interval_s, a, health, now)
        )
    _rollups_upsert(hourly)
    report.hourly_written += len(hourly)
    rows = five
    report.attributions_written += _attribute(rows, device_ids, start, end, source=source)


def _fleet_rollup_sql(vendor: str, resolution: int, source, windows, node_ids) -> list[tuple[str, list]]:
    """DELETE then INSERT … SELECT of the fleet rollups of the given windows and nodes (None: all)."""
    table, rollups = FleetRollup._meta.db_table, DeviceRollup._meta.db_table

    def among(column: str, values) -> tuple[str, list]:
        values = list(values)
        if vendor == "postgresql":
            return f" AND {column} = ANY(%s)", [values]
        return f" AND {column} IN ({', '.join(['%s'] * len(values))})", values

    delete, delete_params = f"DELETE FROM {table} WHERE resolution = %s", [resolution]  # noqa: S608
    where, params = "r.partition = '' AND r.resolution = %s", [resolution]
    if source is not None:
        delete += " AND source = %s"
        delete_params.append(source)
        where += " AND r.source = %s"
        params.append(source)
    for column, inner, values in (
        ("window_start", "r.window_start", windows),
        ("node_id", "d.node_id", node_ids),
    ):
        if values is not None:
            sql, extra = among(column, values)
            delete += sql
            delete_params += extra
            sql, extra = among(inner, values)
            where += sql
            params += extra
    label = "COALESCE(m.name, d.raw_model_name, '?')"  # Device.model_label, as the report labelled cards
    insert = (
        f"INSERT INTO {table} (resolution, window_start, source, node_id, vendor, model_label, cards, "  # noqa: S608
        "estimated, util_sum, util_n, util_max) "
        f"SELECT r.resolution, r.window_start, r.source, d.node_id, d.vendor, {label}, COUNT(*), "
        "SUM(CASE WHEN r.quality = 'estimated' THEN 1 ELSE 0 END), SUM(r.util_sum), SUM(r.util_n), MAX(r.util_max) "
        f"FROM {rollups} r JOIN inventory_device d ON d.id = r.device_id "
        "LEFT JOIN catalog_devicemodel m ON m.id = d.device_model_id "
        f"WHERE {where} GROUP BY r.resolution, r.window_start, r.source, d.node_id, d.vendor, {label}"
    )
    return [(delete, delete_params), (insert, params)]


def fleet_rollups_rebuild(*, resolution: int, source: str | None = None, windows=None, node_ids=None) -> None:
    """Recompute the fleet rollups (Σ per node, vendor and model of its whole-card rollups) of the given
    windows and nodes from the device rollups: exact and idempotent (a window ingested twice gives the
    same rows). Called by ingest inside its transaction; ``None`` = every window / node (backfill)."""
    from django.db import connection

    if windows is not None and not windows or node_ids is not None and not node_ids:
        return
    if windows is not None:  # raw SQL: the backend's own datetime form (SQLite stores naive UTC text)
        windows = [connection.ops.adapt_datetimefield_value(w) for w in windows]
    with connection.cursor() as cursor:
        for sql, params in _fleet_rollup_sql(connection.vendor, resolution, source, windows, node_ids):
            cursor.execute(sql, params)


# ---------------------------------------------------------------------------------------------------
# Attribution to jobs
# ---------------------------------------------------------------------------------------------------


def _pod_jobs(row: DeviceRollup) -> set[tuple[str, int]]:
    out = set()
    for p in row.pods or []:
        m = _POD_JOB.match(p.get("pod", ""))
        if m:
            out.add((p.get("namespace", ""), int(m.group(1))))
    return out


def _labelled(row: DeviceRollup, alloc: dict) -> bool:
    """The row is exact data whose exporter pod label names this allocation's job (in its namespace)."""
    if row.quality != Quality.EXACT:
        return False
    spaces = (alloc["job__project__namespace"], alloc["job__project__slug"])
    return any(job == alloc["job_id"] and ns in spaces for ns, job in _pod_jobs(row))


def _attribute(
    rows: list[DeviceRollup], device_ids: list[int], start: datetime, end: datetime, *, source: str
) -> int:
    """(Re)build JobUtilization for the given 5-minute rows; returns the number of rows written.

    ``share`` = the allocation's compute share × the part of the window it was held; ``busy_pct`` = the
    card-busy points attributed to it (job utilization = busy_pct ÷ share).

    Whole-card rows: exact when one allocation held the card and the exporter's pod label names its job;
    otherwise estimated — the card's busy % is split between the overlapping allocations by share.
    Partition rows (MIG / vNPU instances): an instance whose pod label names a job holding an allocation
    of that profile is exact for that job; the unlabelled instances' average busy % is given, estimated,
    to the allocations of the profile not claimed by a labelled instance.
    """
    JobUtilization.objects.filter(
        source=source, device_id__in=device_ids, window_start__gte=start, window_start__lt=end
    ).delete()
    allocs = list(
        Allocation.objects.filter(device_id__in=device_ids, started_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .values(
            "job_id",
            "device_id",
            "compute_milli",
            "partition_profile",
            "started_at",
            "released_at",
            "job__project_id",
            "job__project__namespace",
            "job__project__slug",
        )
    )
    if not allocs:
        return 0
    by_device: dict[int, list[dict]] = defaultdict(list)
    for a in allocs:
        a["start_ts"] = a["started_at"].timestamp()
        a["end_ts"] = a["released_at"].timestamp() if a["released_at"] else float("inf")
        by_device[a["device_id"]].append(a)

    def held_in(device_id: int, w0: float, profile: str) -> list[tuple[dict, float]]:
        out = []
        for a in by_device.get(device_id, ()):
            if (a["partition_profile"] or "") != profile:
                continue
            overlap = min(w0 + WINDOW_S, a["end_ts"]) - max(w0, a["start_ts"])
            if overlap > 0:
                out.append((a, a["compute_milli"] / 1000.0 * overlap / WINDOW_S))
        return out

    out: list[JobUtilization] = []

    def add(
        a: dict, row: DeviceRollup, share: float, busy: float | None, exact: bool, mem: float | None
    ) -> None:
        out.append(
            JobUtilization(
                job_id=a["job_id"],
                device_id=row.device_id,
                window_start=row.window_start,
                source=source,
                quality=Quality.EXACT if exact else Quality.ESTIMATED,
                share=min(share, 1.0),
                busy_pct=busy,
                mem_used_avg_mib=mem,
                project_id_snapshot=a["job__project_id"],
            )
        )

    instances: dict[tuple[int, float, str], list[DeviceRollup]] = defaultdict(list)
    for r in rows:
        if r.device_id not in by_device:
            continue
        w0 = r.window_start.timestamp()
        if r.partition:
            instances[(r.device_id, w0, r.partition.split("/", 1)[0])].append(r)
            continue
        held = held_in(r.device_id, w0, "")
        if not held:
            continue
        total = sum(share for _, share in held)
        exact = len(held) == 1 and _labelled(r, held[0][0])
        for a, share in held:
            busy = r.util_avg * share / total if r.util_avg is not None and total > 0 else None
            add(a, r, share, busy, exact, r.mem_used_avg_mib if len(held) == 1 else None)
    for (device_id, w0, profile), group in instances.items():
        held = held_in(device_id, w0, profile)
        if not held:
            continue
        claimed: set[int] = set()
        rest = []
        for r in sorted(group, key=lambda r: r.partition):
            match = next(((a, s) for a, s in held if a["job_id"] not in claimed and _labelled(r, a)), None)
            if match is None:
                rest.append(r)
                continue
            a, share = match
            claimed.add(a["job_id"])
            busy = r.util_avg * share if r.util_avg is not None else None
            add(a, r, share, busy, True, r.mem_used_avg_mib)
        utils = [r.util_avg for r in rest if r.util_avg is not None]
        mean = sum(utils) / len(utils) if utils else None
        for a, share in held:
            if a["job_id"] in claimed or not rest:
                continue
            add(a, rest[0], share, mean * share if mean is not None else None, False, None)
    # One job holding several allocations on one card (e.g. two instances): one row per window.
    merged: dict[tuple[int, int, datetime], JobUtilization] = {}
    for ju in out:
        key = (ju.job_id, ju.device_id, ju.window_start)
        prev = merged.get(key)
        if prev is None:
            merged[key] = ju
            continue
        prev.share = min(prev.share + ju.share, 1.0)
        if ju.busy_pct is not None:
            prev.busy_pct = (prev.busy_pct or 0.0) + ju.busy_pct
        if ju.mem_used_avg_mib is not None:
            prev.mem_used_avg_mib = (prev.mem_used_avg_mib or 0.0) + ju.mem_used_avg_mib
        if ju.quality == Quality.ESTIMATED:
            prev.quality = Quality.ESTIMATED
    JobUtilization.objects.bulk_create(list(merged.values()), batch_size=2000)
    return len(merged)


# ---------------------------------------------------------------------------------------------------
# Front doors: one exporter scrape, a Prometheus window, a configured source
# ---------------------------------------------------------------------------------------------------


def scrape_convert(*, text: str, at: datetime | None = None) -> tuple[Conversion, list[tuple[int, str]]]:
    """Parse one exporter page and fold it into samples (no database). Raises ParseFailed if nothing parses."""
    parsed = exposition.parse(text)
    if not parsed.samples:
        detail = {str(line): msg for line, msg in parsed.errors[:20]}
        raise ParseFailed(
            "No metric sample could be read from the exposition text."
            if parsed.errors or text.strip()
            else "The exposition text is empty.",
            details=detail or None,
        )
    default_at = (at or timezone.now()).timestamp()
    conversion = series_to_samples(
        ((s.name, s.labels, s.value, s.timestamp) for s in parsed.samples), default_at=default_at
    )
    return conversion, parsed.errors


def scrape_ingest(
    *,
    text: str,
    source: str = "exporter",
    at: datetime | None = None,
    cluster: Cluster | None = None,
    quality: str = Quality.EXACT,
    scrape_interval_s: int | None = None,
    actor: Any = "system",
    dry_run: bool = False,
    now: datetime | None = None,
) -> tuple[IngestReport, Conversion]:
    """Ingest one exporter scrape in Prometheus text format (vendor detected from the metric names)."""
    conversion, errors = scrape_convert(text=text, at=at)
    report = IngestReport(source=source, dry_run=dry_run)
    for line, message in errors:
        report.skip("malformed_line", f"line {line}: {message}")
    report.rejected_lines = list(errors)
    report.absorb(conversion)
    if not conversion.samples:
        report.received = 0
        return report, conversion
    samples_ingest(
        samples=conversion.samples,
        source=source,
        quality=quality,
        scrape_interval_s=scrape_interval_s,
        cluster=cluster,
        actor=actor,
        now=now,
        dry_run=dry_run,
        report=report,
    )
    return report, conversion


def _query_names() -> str:
    from apps.telemetry import metric_maps as mm

    names = set(mm.UNIFIED_GAUGES)
    for vmap in mm.VENDOR_MAPS.values():
        names.update(vmap.gauges)
        names.update(vmap.counters)
        names.update(vmap.health)
        names.update(vmap.pod_info)
    names.update(mm.AMD_FIELD_PREFIX + n for n in mm.AMD.gauges | mm.AMD.counters | mm.AMD.health)
    return "|".join(sorted(re.escape(n) for n in names))


def prometheus_query() -> str:
    """The one PromQL selector Suanchi reads: every mapped exporter family plus the unified series."""
    return '{__name__=~"' + _query_names() + '"}'


def prometheus_ingest(
    *,
    url: str,
    start: datetime,
    end: datetime,
    step_s: int = 10,
    source: str | None = None,
    cluster: Cluster | None = None,
    actor: Any = "system",
    chunk_s: int = HOUR_S,
    progress: Callable[[int, int], None] | None = None,
    now: datetime | None = None,
) -> IngestReport:
    """Backfill ``[start, end)`` from a Prometheus HTTP API with ``query_range``, one chunk (one
    transaction) at a time, chunks aligned to 5-minute windows. Network calls happen outside transactions."""
    from apps.telemetry.prometheus import PrometheusClient

    if end <= start:
        raise ValidationFailed("The end must be after the start.", details={"end": ["must be after start"]})
    if step_s < 1:
        raise ValidationFailed("The step must be at least one second.", details={"step": ["≥ 1 s"]})
    client = PrometheusClient(url)
    source = source or f"prometheus:{url}"
    report = IngestReport(source=source)
    query = prometheus_query()
    t0 = start.timestamp()
    t0 -= t0 % WINDOW_S
    t_end = end.timestamp()
    chunk_s = max(WINDOW_S, chunk_s - chunk_s % WINDOW_S)
    total = max(1, int((t_end - t0 + chunk_s - 1) // chunk_s))
    done = 0
    while t0 < t_end:
        t1 = min(t0 + chunk_s, t_end)
        # query_range includes both ends; stop one step short of the next chunk's first instant.
        matrix = client.query_range(
            query, start=t0, end=max(t0, t1 - (step_s if t1 < t_end else 0)), step=step_s
        )
        series = (
            (item["metric"].get("__name__", ""), item["metric"], float(v), float(ts))
            for item in matrix
            for ts, v in item.get("values", [])
        )
        conversion = series_to_samples(series, default_at=t0)
        report.absorb(conversion)
        samples_ingest(
            samples=conversion.samples,
            source=source,
            quality=Quality.EXACT,
            scrape_interval_s=step_s,
            cluster=cluster,
            actor=actor,
            now=now,
            report=report,
        )
        done += 1
        if progress:
            progress(done, total)
        t0 = t1
    return report


def source_ingest(
    *, source: MetricSource, actor: Any = "worker", now: datetime | None = None
) -> IngestReport | None:
    """Ingest a configured source's latest windows; record the outcome (and any error) on the source."""
    from apps.telemetry.prometheus import PrometheusError, scrape

    now = now or timezone.now()
    lookback = timedelta(minutes=setting("TELEMETRY_FIRST_LOOKBACK_MINUTES", 15))
    try:
        if source.kind == MetricSource.Kind.PROMETHEUS:
            since = source.ingested_until or (now - lookback)
            start_ts = since.timestamp() - since.timestamp() % WINDOW_S
            report = prometheus_ingest(
                url=source.url,
                start=_dt(start_ts),
                end=now,
                step_s=source.step_seconds,
                source=source.label,
                cluster=source.cluster,
                actor=actor,
                now=now,
            )
        else:
            report = IngestReport(source=source.label)
            for target in source.targets:
                text = scrape(target)
                part, _ = scrape_ingest(
                    text=text,
                    source=source.label,
                    at=now,
                    cluster=source.cluster,
                    scrape_interval_s=60,
                    actor=actor,
                    now=now,
                )
                _merge_reports(report, part)
    except (PrometheusError, OSError, ParseFailed) as exc:
        MetricSource.objects.filter(pk=source.pk).update(last_run_at=now, last_error=str(exc)[:2000])
        return None
    # The window now in progress is re-read next time (a covering batch replaces it).
    until = _dt(now.timestamp() - now.timestamp() % WINDOW_S)
    MetricSource.objects.filter(pk=source.pk).update(
        last_run_at=now, last_error="", ingested_until=until, last_report=report.as_dict()
    )
    return report


def _merge_reports(into: IngestReport, part: IngestReport) -> None:
    for name in (
        "received",
        "used",
        "counter_resets",
        "rollups_written",
        "hourly_written",
        "attributions_written",
        "events_raised",
        "placements_moved",
        "placement_conflicts",
    ):
        setattr(into, name, getattr(into, name) + getattr(part, name))
    for reason, count in part.skipped.items():
        into.skipped[reason] += count
        for ex in part.examples.get(reason, []):
            if len(into.examples[reason]) < 5:
                into.examples[reason].append(ex)
    into.vendors = sorted(set(into.vendors) | set(part.vendors))
    into.window_start = min(filter(None, [into.window_start, part.window_start]), default=None)
    into.window_end = max(filter(None, [into.window_end, part.window_end]), default=None)


def sources_ingest(*, actor: Any = "worker", now: datetime | None = None) -> dict[str, Any]:
    """Every enabled source; nothing configured → nothing done."""
    results: dict[str, Any] = {}
    for source in MetricSource.objects.filter(enabled=True).select_related("cluster").order_by("pk"):
        report = source_ingest(source=source, actor=actor, now=now)
        results[source.label] = (
            report.as_dict() if report else {"error": MetricSource.objects.get(pk=source.pk).last_error}
        )
    return {"sources": len(results), "results": results}


def rollups_purge(*, now: datetime | None = None) -> dict[str, int]:
    """Drop 5-minute rows past their retention, hourly rows and job utilization past theirs."""
    now = now or timezone.now()
    five_cut = now - timedelta(days=setting("TELEMETRY_ROLLUP_RETENTION_DAYS", 14))
    hour_cut = now - timedelta(days=setting("TELEMETRY_HOURLY_RETENTION_DAYS", 400))
    five, _ = DeviceRollup.objects.filter(resolution=WINDOW_S, window_start__lt=five_cut).delete()
    hourly, _ = DeviceRollup.objects.filter(resolution=HOUR_S, window_start__lt=hour_cut).delete()
    jobs, _ = JobUtilization.objects.filter(window_start__lt=hour_cut).delete()
    FleetRollup.objects.filter(resolution=WINDOW_S, window_start__lt=five_cut).delete()
    FleetRollup.objects.filter(resolution=HOUR_S, window_start__lt=hour_cut).delete()
    return {"five_minute": five, "hourly": hourly, "job_utilization": jobs}


# ---------------------------------------------------------------------------------------------------
# Metric sources (configuration)
# ---------------------------------------------------------------------------------------------------

_SOURCE_FIELDS = ["cluster", "name", "kind", "url", "targets", "step_seconds", "enabled"]


def metric_source_create(
    *,
    actor: Any,
    cluster: Cluster,
    name: str,
    kind: str = MetricSource.Kind.PROMETHEUS,
    url: str = "",
    targets: list | None = None,
    step_seconds: int = 10,
    enabled: bool = True,
) -> MetricSource:
    with transaction.atomic():
        source = MetricSource(
            cluster=cluster,
            name=name,
            kind=kind,
            url=url,
            targets=targets or [],
            step_seconds=step_seconds,
            enabled=enabled,
        )
        source.full_clean()
        source.save()
        change_record_create(
            actor=actor, action="telemetry.source.create", obj=source, after=snapshot(source, _SOURCE_FIELDS)
        )
    return source


def metric_source_update(*, actor: Any, source: MetricSource, **changes: Any) -> MetricSource:
    unknown = set(changes) - set(_SOURCE_FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        source = MetricSource.objects.select_for_update().get(pk=source.pk)
        before = snapshot(source, _SOURCE_FIELDS)
        for key, value in changes.items():
            setattr(source, key, value)
        source.full_clean()
        source.save()
        change_record_create(
            actor=actor,
            action="telemetry.source.update",
            obj=source,
            before=before,
            after=snapshot(source, _SOURCE_FIELDS),
        )
    return source


def metric_source_delete(*, actor: Any, source: MetricSource) -> None:
    with transaction.atomic():
        change_record_create(
            actor=actor, action="telemetry.source.delete", obj=source, before=snapshot(source, _SOURCE_FIELDS)
        )
        source.delete()


# ------------------------------------------------------------------ backfill with progress


# The BackgroundRun kind of a metric backfill, and the task that runs it.
BACKFILL_RUN_KIND = "telemetry.backfill"
BACKFILL_TASK = "worker.tasks.telemetry.backfill_task"


def backfill_request(*, source: MetricSource, start: datetime, end: datetime, actor: Any) -> BackgroundRun:
    """Queue a backfill of ``[start, end)`` from a Prometheus source; a worker runs it after commit and
    publishes its progress (one hour chunk at a time). Returns the core ``BackgroundRun``: ``params``
    name the source and the window, ``result`` gets the ingest report."""
    from apps.core import runs

    if source.kind != MetricSource.Kind.PROMETHEUS or not source.url:
        raise ValidationFailed(
            f"Source {source} is not a Prometheus HTTP API; only those can be backfilled.",
            details={"source": ["needs kind prometheus and a URL"]},
        )
    if end <= start:
        raise ValidationFailed("The end must be after the start.", details={"end": ["must be after start"]})
    if end - start > timedelta(days=31):
        raise ValidationFailed(
            "Backfill at most 31 days at a time.", details={"end": ["≤ 31 days after start"]}
        )
    with transaction.atomic():
        run = runs.run_create(
            kind=BACKFILL_RUN_KIND,
            actor=actor,
            params={
                "source": source.pk,
                "source_name": str(source)[:200],
                "start": start.isoformat(),
                "end": end.isoformat(),
            },
        )
        change_record_create(
            actor=actor,
            action="telemetry.backfill_request",
            obj=run,
            after={"source": source.pk, "start": start.isoformat(), "end": end.isoformat()},
        )
        runs.run_enqueue(run=run, task=BACKFILL_TASK)
    return run


def backfill_run(*, run_id: int, actor: Any = "worker") -> BackgroundRun | None:
    """Run a queued backfill (at most once: the queued → running move is a conditional update)."""
    from django.utils.dateparse import parse_datetime

    from apps.core import runs
    from apps.telemetry.prometheus import PrometheusError

    run = runs.run_start(run_id=run_id, kind=BACKFILL_RUN_KIND)
    if run is None:
        return None
    source = MetricSource.objects.select_related("cluster").filter(pk=run.params.get("source")).first()
    if source is None:
        runs.run_fail(run=run, error="the metric source was deleted before the backfill ran")
        return run

    def progress(done: int, total: int) -> None:
        runs.run_progress(run=run, done=done, total=total)

    try:
        report = prometheus_ingest(
            url=source.url,
            start=parse_datetime(run.params["start"]),
            end=parse_datetime(run.params["end"]),
            step_s=source.step_seconds,
            source=source.label,
            cluster=source.cluster,
            actor=actor,
            progress=progress,
        )
    except (ApplicationError, PrometheusError) as exc:
        runs.run_fail(run=run, error=str(getattr(exc, "message", exc)))
    except Exception:
        runs.run_fail(run=run, error="the backfill stopped on an unexpected error; see the worker log")
        raise
    else:
        runs.run_finish(run=run, result=report.as_dict())
    run.refresh_from_db()
    return run
