"""Rollups: samples folded into 5-minute rows, hourly rows as sums of their 5-minute rows, fleet rollups
(Σ per node, vendor and model), one bulk upsert, and retention.

Counter increases follow Prometheus' ``increase()``: a drop is a reset and the new value counts from
zero. Hourly and fleet rows are recomputed from the 5-minute rows, so re-ingesting a window is idempotent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from apps.telemetry.attribution import _attribute, job_summaries_rebuild
from apps.telemetry.models import (
    SUMMARY_SPANS,
    CardSummary,
    DeviceRollup,
    FleetRollup,
    FleetTotal,
    JobSummary,
    JobUtilization,
    NodeSummary,
    Quality,
)
from apps.telemetry.samples import Sample
from apps.telemetry.windows import HOUR_S, WINDOW_S, _bucket_sql, _dt, setting

if TYPE_CHECKING:
    from apps.telemetry.ingest.report import IngestReport

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


def _rebuild_filters(table: str, resolution: int, source: str | None) -> tuple[str, list, str, list]:
    """A rebuild's DELETE of ``table``'s rows of a resolution (and source), and the matching filter of
    the whole-card rollups ``r`` it recomputes them from: (delete, its params, where, its params)."""
    delete, delete_params = f"DELETE FROM {table} WHERE resolution = %s", [resolution]  # noqa: S608
    where, params = "r.partition = '' AND r.resolution = %s", [resolution]
    if source is not None:
        delete += " AND source = %s"
        delete_params.append(source)
        where += " AND r.source = %s"
        params.append(source)
    return delete, delete_params, where, params


def _fleet_rollup_sql(vendor: str, resolution: int, source, windows, node_ids) -> list[tuple[str, list]]:
    """DELETE then INSERT … SELECT of the fleet rollups of the given windows and nodes (None: all)."""
    table, rollups = FleetRollup._meta.db_table, DeviceRollup._meta.db_table

    def among(column: str, values) -> tuple[str, list]:
        values = list(values)
        if vendor == "postgresql":
            return f" AND {column} = ANY(%s)", [values]
        return f" AND {column} IN ({', '.join(['%s'] * len(values))})", values

    delete, delete_params, where, params = _rebuild_filters(table, resolution, source)
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
    same rows). Called by ingest inside its transaction; ``None`` = every window / node (backfill).
    The per-card period summaries of the buckets these windows fall in are rebuilt with them."""
    from django.db import connection

    if windows is not None and not windows or node_ids is not None and not node_ids:
        return
    card_summaries_rebuild(resolution=resolution, source=source, windows=windows, node_ids=node_ids)
    stamps = windows
    if windows is not None:  # raw SQL: the backend's own datetime form (SQLite stores naive UTC text)
        windows = [connection.ops.adapt_datetimefield_value(w) for w in windows]
    with connection.cursor() as cursor:
        for sql, params in _fleet_rollup_sql(connection.vendor, resolution, source, windows, node_ids):
            cursor.execute(sql, params)
    node_summaries_rebuild(resolution=resolution, source=source, windows=stamps, node_ids=node_ids)
    fleet_totals_rebuild(resolution=resolution, source=source, windows=windows)


def fleet_totals_rebuild(*, resolution: int, source: str | None = None, windows=None) -> None:
    """Recompute the fleet totals (``FleetTotal``: Σ per window, source, vendor and model of the fleet
    rollups) of the given windows (in the backend's datetime form; ``None``: every window) from the
    fleet rollups. Exact and idempotent."""
    from django.db import connection

    table, fleet = FleetTotal._meta.db_table, FleetRollup._meta.db_table
    delete, params = f"DELETE FROM {table} WHERE resolution = %s", [resolution]  # noqa: S608 (constants)
    where = "resolution = %s"
    if source is not None:
        delete += " AND source = %s"
        where += " AND source = %s"
        params.append(source)
    if windows is not None:
        windows = list(windows)
        if connection.vendor == "postgresql":
            among, extra = " AND window_start = ANY(%s)", [windows]
        else:
            among, extra = f" AND window_start IN ({', '.join(['%s'] * len(windows))})", windows
        delete += among
        where += among
        params += extra
    insert = (
        f"INSERT INTO {table} (resolution, window_start, source, vendor, model_label, cards, estimated, "  # noqa: S608
        "util_sum, util_n, util_max) SELECT resolution, window_start, source, vendor, model_label, SUM(cards), "
        f"SUM(estimated), SUM(util_sum), SUM(util_n), MAX(util_max) FROM {fleet} WHERE {where} "
        "GROUP BY resolution, window_start, source, vendor, model_label"
    )
    with connection.cursor() as cursor:
        cursor.execute(delete, params)
        cursor.execute(insert, params)


def card_summaries_rebuild(
    *, resolution: int, source: str | None = None, windows=None, node_ids=None
) -> None:
    """Recompute the card summaries (``CardSummary``: Σ per card, source and bucket of its whole-card
    rollups) of the buckets from the first to the last of those ``windows`` fall in, for the cards of
    ``node_ids``, from the device rollups (``None``: every bucket / card). Exact and idempotent."""
    from django.db import connection

    span = SUMMARY_SPANS[resolution]
    table, rollups = CardSummary._meta.db_table, DeviceRollup._meta.db_table
    delete, delete_params, where, params = _rebuild_filters(table, resolution, source)
    if windows is not None:
        low, high = _buckets_of(windows, span)
        delete += " AND bucket_start >= %s AND bucket_start < %s"
        delete_params += [low, high]
        where += " AND r.window_start >= %s AND r.window_start < %s"
        params += [low, high]
    if node_ids is not None:
        nodes = f"(SELECT id FROM inventory_device WHERE node_id IN ({', '.join(['%s'] * len(node_ids))}))"  # noqa: S608
        delete += f" AND device_id IN {nodes}"
        delete_params += list(node_ids)
        where += f" AND r.device_id IN {nodes}"
        params += list(node_ids)
    bucket = _bucket_sql(connection.vendor, span)
    insert = (
        f"INSERT INTO {table} (resolution, bucket_start, source, device_id, row_count, estimated, util_sum, "  # noqa: S608
        f"util_n, util_max) SELECT r.resolution, {bucket}, r.source, r.device_id, COUNT(*), "
        "SUM(CASE WHEN r.quality = 'estimated' THEN 1 ELSE 0 END), SUM(r.util_sum), SUM(r.util_n), "
        f"MAX(r.util_max) FROM {rollups} r WHERE {where} GROUP BY r.resolution, {bucket}, r.source, r.device_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(delete, delete_params)
        cursor.execute(insert, params)


def _buckets_of(windows, span: int) -> tuple[Any, Any]:
    """From the start of the bucket of ``span`` seconds the first of ``windows`` (datetimes) falls in
    to the end of the last one's, in the backend's datetime form."""
    from django.db import connection

    stamps = [w.timestamp() for w in windows]
    first, last = min(stamps) // span * span, max(stamps) // span * span
    return tuple(connection.ops.adapt_datetimefield_value(_dt(t)) for t in (first, last + span))


def node_summaries_rebuild(
    *, resolution: int, source: str | None = None, windows=None, node_ids=None
) -> None:
    """Recompute the node summaries (``NodeSummary``: Σ per node, source and bucket of its fleet
    rollups) of the buckets ``windows`` (datetimes) fall in, for ``node_ids``, from the fleet rollups
    (``None``: every bucket / node). Exact and idempotent."""
    from django.db import connection

    span = SUMMARY_SPANS[resolution]
    table, fleet = NodeSummary._meta.db_table, FleetRollup._meta.db_table
    # The same conditions on the summaries (bucket_start) and on the fleet rollups (r.window_start).
    conditions, params = [("resolution = %s", "r.resolution = %s")], [resolution]
    if source is not None:
        conditions.append(("source = %s", "r.source = %s"))
        params.append(source)
    if windows is not None:
        conditions.append(
            ("bucket_start >= %s AND bucket_start < %s", "r.window_start >= %s AND r.window_start < %s")
        )
        params += list(_buckets_of(windows, span))
    if node_ids is not None:
        among = f"node_id IN ({', '.join(['%s'] * len(node_ids))})"
        conditions.append((among, f"r.{among}"))
        params += list(node_ids)
    where = " AND ".join(inner for _, inner in conditions)
    delete = f"DELETE FROM {table} WHERE {' AND '.join(own for own, _ in conditions)}"  # noqa: S608 (constants)
    bucket = _bucket_sql(connection.vendor, span)
    insert = (
        f"INSERT INTO {table} (resolution, bucket_start, source, node_id, estimated, util_sum, util_n, "  # noqa: S608
        f"util_max) SELECT r.resolution, {bucket}, r.source, r.node_id, SUM(r.estimated), SUM(r.util_sum), "
        f"SUM(r.util_n), MAX(r.util_max) FROM {fleet} r WHERE {where} "
        f"GROUP BY r.resolution, {bucket}, r.source, r.node_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(delete, params)
        cursor.execute(insert, params)


def rollups_purge(*, now: datetime | None = None) -> dict[str, int]:
    """Drop 5-minute rows past their retention, hourly rows and job utilization past theirs."""
    now = now or timezone.now()
    five_cut = now - timedelta(days=setting("TELEMETRY_ROLLUP_RETENTION_DAYS", 14))
    hour_cut = now - timedelta(days=setting("TELEMETRY_HOURLY_RETENTION_DAYS", 400))
    five, _ = DeviceRollup.objects.filter(resolution=WINDOW_S, window_start__lt=five_cut).delete()
    hourly, _ = DeviceRollup.objects.filter(resolution=HOUR_S, window_start__lt=hour_cut).delete()
    jobs, _ = JobUtilization.objects.filter(window_start__lt=hour_cut).delete()
    JobSummary.objects.filter(bucket_start__lt=hour_cut).delete()
    FleetRollup.objects.filter(resolution=WINDOW_S, window_start__lt=five_cut).delete()
    FleetRollup.objects.filter(resolution=HOUR_S, window_start__lt=hour_cut).delete()
    FleetTotal.objects.filter(resolution=WINDOW_S, window_start__lt=five_cut).delete()
    FleetTotal.objects.filter(resolution=HOUR_S, window_start__lt=hour_cut).delete()
    # A 5-minute summary's bucket that starts before its cut is never wholly inside a period the report
    # reads these for (that period reads the hourly rows).
    CardSummary.objects.filter(resolution=WINDOW_S, bucket_start__lt=five_cut).delete()
    CardSummary.objects.filter(resolution=HOUR_S, bucket_start__lt=hour_cut).delete()
    NodeSummary.objects.filter(resolution=WINDOW_S, bucket_start__lt=five_cut).delete()
    NodeSummary.objects.filter(resolution=HOUR_S, bucket_start__lt=hour_cut).delete()
    # The hour and the day the hourly cut falls inside keep the rows from the cut on, which a period
    # of whole hours or days reads from their summaries: summed again from the rows left.
    job_summaries_rebuild(start=hour_cut, end=hour_cut)
    card_summaries_rebuild(resolution=HOUR_S, windows=[hour_cut])
    node_summaries_rebuild(resolution=HOUR_S, windows=[hour_cut])
    return {"five_minute": five, "hourly": hourly, "job_utilization": jobs}
