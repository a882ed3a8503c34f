"""Attribution to jobs: each 5-minute card row's busy points shared out to the allocations that held the card."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime

from django.db.models import Q

from apps.jobs.models import Allocation
from apps.telemetry.models import DeviceRollup, JobSummary, JobUtilization, Quality
from apps.telemetry.windows import HOUR_S, WINDOW_S, _bucket_sql, _dt

_POD_JOB = re.compile(r"^suanchi-(\d+)(?:-a\d+)?(?:-|$)")


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
    spaces = (alloc["project__namespace"], alloc["project__slug"])
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

    The job summaries of the hours the rows fall in are rebuilt after them (``job_summaries_rebuild``).
    """
    written = _attribution_write(rows, device_ids, start, end, source=source)
    job_summaries_rebuild(source=source, start=start, end=end)
    return written


def _attribution_write(
    rows: list[DeviceRollup], device_ids: list[int], start: datetime, end: datetime, *, source: str
) -> int:
    JobUtilization.objects.filter(
        source=source, device_id__in=device_ids, window_start__gte=start, window_start__lt=end
    ).delete()
    by_device = _allocations_by_device(device_ids, start, end)
    if not by_device:
        return 0
    out: list[JobUtilization] = []
    instances: dict[tuple[int, float, str], list[DeviceRollup]] = defaultdict(list)
    for r in rows:
        if r.device_id not in by_device:
            continue
        w0 = r.window_start.timestamp()
        if r.partition:
            instances[(r.device_id, w0, r.partition.split("/", 1)[0])].append(r)
            continue
        _attribute_whole_card(out, r, _held_in(by_device, r.device_id, w0, ""), source)
    for (device_id, w0, profile), group in instances.items():
        _attribute_instances(out, group, _held_in(by_device, device_id, w0, profile), source)
    merged = _one_row_per_job(out)
    JobUtilization.objects.bulk_create(merged, batch_size=2000)
    return len(merged)


def _allocations_by_device(device_ids: list[int], start: datetime, end: datetime) -> dict[int, list[dict]]:
    """The allocations held on these cards at some time in ``[start, end)``, by card."""
    allocs = (
        Allocation.objects.filter(device_id__in=device_ids, started_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .values(
            "job_id",
            "device_id",
            "compute_milli",
            "partition_profile",
            "started_at",
            "released_at",
            "project_id",
            "project__namespace",
            "project__slug",
        )
    )
    by_device: dict[int, list[dict]] = defaultdict(list)
    for a in allocs:
        a["start_ts"] = a["started_at"].timestamp()
        a["end_ts"] = a["released_at"].timestamp() if a["released_at"] else float("inf")
        by_device[a["device_id"]].append(a)
    return by_device


def _held_in(
    by_device: dict[int, list[dict]], device_id: int, w0: float, profile: str
) -> list[tuple[dict, float]]:
    """(allocation, share) of each allocation of ``profile`` ("" = whole card) held in the window at ``w0``."""
    out = []
    for a in by_device.get(device_id, ()):
        if (a["partition_profile"] or "") != profile:
            continue
        overlap = min(w0 + WINDOW_S, a["end_ts"]) - max(w0, a["start_ts"])
        if overlap > 0:
            out.append((a, a["compute_milli"] / 1000.0 * overlap / WINDOW_S))
    return out


def _job_row(
    a: dict, row: DeviceRollup, share: float, busy: float | None, exact: bool, mem: float | None, source: str
) -> JobUtilization:
    return JobUtilization(
        job_id=a["job_id"],
        device_id=row.device_id,
        window_start=row.window_start,
        source=source,
        quality=Quality.EXACT if exact else Quality.ESTIMATED,
        share=min(share, 1.0),
        busy_pct=busy,
        mem_used_avg_mib=mem,
        project_id_snapshot=a["project_id"],
    )


def _attribute_whole_card(
    out: list[JobUtilization], r: DeviceRollup, held: list[tuple[dict, float]], source: str
) -> None:
    """A whole-card row: its busy % split between the allocations by share (exact: one, labelled)."""
    if not held:
        return
    total = sum(share for _, share in held)
    exact = len(held) == 1 and _labelled(r, held[0][0])
    for a, share in held:
        busy = r.util_avg * share / total if r.util_avg is not None and total > 0 else None
        out.append(_job_row(a, r, share, busy, exact, r.mem_used_avg_mib if len(held) == 1 else None, source))


def _attribute_instances(
    out: list[JobUtilization], group: list[DeviceRollup], held: list[tuple[dict, float]], source: str
) -> None:
    """A card's instances of one profile in one window: labelled ones exact, the rest's mean estimated."""
    if not held:
        return
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
        out.append(_job_row(a, r, share, busy, True, r.mem_used_avg_mib, source))
    utils = [r.util_avg for r in rest if r.util_avg is not None]
    mean = sum(utils) / len(utils) if utils else None
    for a, share in held:
        if a["job_id"] in claimed or not rest:
            continue
        out.append(
            _job_row(a, rest[0], share, mean * share if mean is not None else None, False, None, source)
        )


def _one_row_per_job(out: list[JobUtilization]) -> list[JobUtilization]:
    """One job holding several allocations on one card (e.g. two instances): one row per window."""
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
    return list(merged.values())


def job_summaries_rebuild(
    *, source: str | None = None, start: datetime | None = None, end: datetime | None = None
) -> None:
    """Recompute the job summaries (``JobSummary``: Σ per hour (UTC), source and project of the job
    utilization rows) of the hours ``[start, end)`` touches, of ``source``, from ``JobUtilization``
    (``None``: every hour / source). Exact and idempotent."""
    from django.db import connection

    table, rows = JobSummary._meta.db_table, JobUtilization._meta.db_table
    delete, delete_params = f"DELETE FROM {table} WHERE 1 = 1", []  # noqa: S608 (constants)
    where, params = "1 = 1", []
    if source is not None:
        delete += " AND source = %s"
        delete_params.append(source)
        where += " AND r.source = %s"
        params.append(source)
    if start is not None and end is not None:
        first, last = start.timestamp() // HOUR_S * HOUR_S, -(-end.timestamp() // HOUR_S) * HOUR_S
        low, high = (connection.ops.adapt_datetimefield_value(_dt(t)) for t in (first, last))
        delete += " AND bucket_start >= %s AND bucket_start < %s"
        delete_params += [low, high]
        where += " AND r.window_start >= %s AND r.window_start < %s"
        params += [low, high]
    bucket = _bucket_sql(connection.vendor, HOUR_S)
    insert = (
        f"INSERT INTO {table} (bucket_start, source, project_id_snapshot, row_count, estimated, busy_sum, "  # noqa: S608
        f"share_sum) SELECT {bucket}, r.source, r.project_id_snapshot, COUNT(*), "
        "SUM(CASE WHEN r.quality = 'estimated' THEN 1 ELSE 0 END), COALESCE(SUM(r.busy_pct), 0), SUM(r.share) "
        f"FROM {rows} r WHERE {where} GROUP BY {bucket}, r.source, r.project_id_snapshot"
    )
    with connection.cursor() as cursor:
        cursor.execute(delete, delete_params)
        cursor.execute(insert, params)
