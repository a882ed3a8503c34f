"""Allocation rows: what a placement claims on each card, re-checked under row locks, and releases.

The scheduling cycle (``services._persist``), scaling (``scaling.replicas_add``) and the job lifecycle
(``lifecycle``: finish, cancel, preempt, retry) all write or release Allocation rows through these
helpers, so the capacity rules live in one place: a whole card excludes every other allocation,
memory is never overcommitted, and compute share stays within 100 % × the pool's overcommit factor
(shared slices only). Locks are taken in primary-key order (CONVENTIONS "Allocation").
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.core.audit import actor_fields
from apps.core.bulk import among, unsaved
from apps.core.stored_text import stored
from apps.inventory.models import Device
from apps.jobs.events import record_job_events
from apps.jobs.models import Allocation, Job, JobEvent
from apps.scheduling.engine.model import WHOLE, Decision
from apps.scheduling.engine.share import overcommit_pct, share_fits

CU_QUANTUM = Decimal("0.0001")


def allocation_compute_units(coefficient: Decimal | None, compute_milli: int) -> Decimal:
    """Compute units of one allocation row; 0 for a card model without a coefficient (unknown)."""
    if coefficient is None:
        return Decimal(0)
    return (coefficient * Decimal(compute_milli) / Decimal(WHOLE)).quantize(CU_QUANTUM)


def device_usage(device_ids: list[int]) -> dict[int, list[int]]:
    """Active totals per device: [memory, hard milli, shared milli, whole count]."""
    usage: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    rows = Allocation.objects.filter(among("device_id", device_ids), released_at__isnull=True).values_list(
        "device_id", "memory_mib", "compute_milli", "isolation", "whole_card"
    )
    for device_id, memory, compute, isolation, whole in rows:
        u = usage[device_id]
        u[0] += memory
        if whole:
            u[3] += 1
        elif isolation == "shared":
            u[2] += compute
        else:
            u[1] += compute
    return usage


def locked_device_caps(device_ids: list[int]) -> dict[int, tuple]:
    """Lock the devices (``SELECT … FOR UPDATE``, primary-key order) and return, per device: memory
    capacity (MiB), overcommit factor (%), node id, device model id, vendor, pool id."""
    return locked_devices(device_ids)[0]


_UNREAD_DEVICE_COLUMNS = (
    "partitions",
    "mig_profiles",
    "created_at",
    "updated_at",
    "last_seen_at",
    "serial",
    "firmware_version",
    "health_reason",
    "cordon_reason",
)


def locked_devices(device_ids: list[int]) -> tuple[dict[int, tuple], dict[int, Device]]:
    """``locked_device_caps``, and the locked rows themselves as ``Device`` instances (the columns no
    renderer reads left unread: the JSON ``partitions`` and ``mig_profiles``, timestamps, free
    texts; their node's name and cluster id as ``cap_node_name`` and ``cap_cluster``), in the same
    query: the cycle renders its placed jobs' manifests from them (``persist``), which cost a second
    read of every card and node."""
    if not device_ids:
        return {}, {}
    rows = (
        Device.objects.select_for_update(of=("self",))
        .filter(among("pk", device_ids))
        # columns no renderer reads (JSON, timestamps parsed per card, free texts) stay unread
        .defer(*_UNREAD_DEVICE_COLUMNS)
        .annotate(
            cap_model_memory=F("device_model__memory_mib"),
            cap_factor=F("node__pool__overcommit_factor"),
            cap_pool=F("node__pool_id"),
            cap_node_name=F("node__name"),
            cap_cluster=F("node__cluster_id"),
        )
        .order_by("pk")
    )
    caps, devices = {}, {}
    for d in rows:
        memory = d.cap_model_memory or d.memory_mib or 0
        factor = overcommit_pct(d.cap_factor)
        caps[d.pk] = (memory, factor, d.node_id, d.device_model_id, d.vendor, d.cap_pool)
        devices[d.pk] = d
    return caps, devices


def allocation_row(
    job: Job,
    pk: int,
    a,
    *,
    caps: dict[int, tuple],
    replica: int,
    coefficients: dict[int, Decimal],
    trace_id: str | uuid.UUID,
    now,
    borrowed: bool = False,
) -> Allocation:
    """The Allocation for one claimed card assignment (``a``) of a placement (unsaved). ``trace_id``:
    the decision's, as text or a UUID."""
    compute = WHOLE if a.whole else a.compute
    row = unsaved(
        Allocation,
        job_id=job.pk,
        project_id=job.project_id,
        device_id=pk,
        node_id=caps[pk][2],
        replica=replica,
        attempt=job.attempt,
        whole_card=a.whole,
        memory_mib=caps[pk][0] if a.whole else a.memory_mib,
        compute_milli=compute,
        isolation=a.isolation,
        partition_profile=(job.template.partition_profile if job.template_id else ""),
        mig_start=getattr(a, "mig_start", None),
        compute_units=allocation_compute_units(coefficients.get(caps[pk][3]), compute),
        borrowed=borrowed,
        trace_id=trace_id if isinstance(trace_id, uuid.UUID) else uuid.UUID(trace_id),
        started_at=now,
    )
    _JOB.set_cached_value(row, job)  # as ``job=job`` would
    return row


_JOB = Allocation._meta.get_field("job")


def claim_placement(decision: Decision, usage: dict[int, list[int]], caps: dict[int, tuple]):
    """Re-check every card of a placement against locked, current totals (``usage`` from
    ``device_usage``; ``caps`` per device: memory capacity, overcommit factor, …). Returns the
    totals with the placement added and its ``(replica, device pk, assignment)`` rows, or None when a
    card no longer has room (another cycle took it first). ``usage`` itself is left unchanged."""
    # A shallow copy, and copies of the touched cards' totals only: a batch of placements stays linear.
    trial = dict(usage)
    copied: set[int] = set()
    rows = []
    if _mig_conflict(decision):
        return None
    for part in decision.placement.parts:
        for a in part.devices:
            pk = int(a.device_id)
            if pk not in caps:
                return None
            cap, factor = caps[pk][0], caps[pk][1]
            if pk not in copied:
                copied.add(pk)
                trial[pk] = list(usage.get(pk, (0, 0, 0, 0)))
            u = trial[pk]
            if not _fits(
                u,
                memory_cap=cap,
                whole=a.whole,
                memory=a.memory_mib,
                compute=a.compute,
                isolation=a.isolation,
                factor=factor,
            ):
                return None
            u[0] += cap if a.whole else a.memory_mib
            if a.whole:
                u[3] += 1
            elif a.isolation == "shared":
                u[2] += a.compute
            else:
                u[1] += a.compute
            rows.append((part.replica, pk, a))
    return trial, rows


def _mig_conflict(decision: Decision) -> bool:
    """Whether the placement's MIG instances collide with the (locked) cards' active instances.

    Counters cannot see it: two 3g instances both at start slot 4 fit memory and compute. The layout
    of each card - its active rows' (profile, start) plus the new ones - must be a valid placement of
    the card's geometry (``apps.catalog.mig``), the same invariant the engine keeps."""
    new: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for part in decision.placement.parts:
        for a in part.devices:
            if getattr(a, "mig_start", None) is not None and a.profile:
                new[int(a.device_id)].append((a.profile, a.mig_start))
    if not new:
        return False
    from apps.catalog.mig import device_geometry, valid_layout

    active = Allocation.objects.filter(
        device_id__in=list(new), released_at__isnull=True, mig_start__isnull=False
    ).values_list("device_id", "partition_profile", "mig_start")
    for device_id, profile, start in active:
        new[device_id].append((profile, start))
    cards = Device.objects.filter(pk__in=list(new)).values_list(
        "pk", "device_model__name", "raw_model_name", "mig_profiles"
    )
    for pk, model_name, raw_name, listing in cards:
        geometry = device_geometry(model_name or raw_name or "", listing)
        if geometry is None or valid_layout(geometry, new[pk]) is not None:
            return True
    return False


def _fits(
    u: list[int], *, memory_cap: int, whole: bool, memory: int, compute: int, isolation: str, factor: int
) -> bool:
    if u[3]:
        return False
    if whole:
        return u[0] == 0 and u[1] == 0 and u[2] == 0
    if u[0] + memory > memory_cap:
        return False
    hard, shared = u[1], u[2]
    if isolation == "shared":
        shared += compute
    else:
        hard += compute
    return share_fits(hard, shared, factor)


RELEASED = stored("%(count)s allocation(s) released: %(reason)s")  # apps.core.stored_text


def allocations_release(
    *,
    job: Job | int,
    actor,
    reason: str = "",
    rows=None,
    msgid: str | None = RELEASED,
    params: dict | None = None,
    data: dict | None = None,
) -> int:
    """Release allocations of ``job`` (a Job or its pk): the one place an allocation gets its
    ``released_at``, whether the job finished, was cancelled or preempted, Kubernetes confirmed its
    objects gone (``releasing``), or it scaled down (``scaling``). Runs in the caller's transaction.

    ``rows``: which allocations (default: every active one of the job); ``reason`` becomes their
    release reason when given. One RELEASED job event says how many, in words
    ``msgid % {"count": n, **params}`` (``params`` default to the reason); a parameter that is itself
    a stored text, ``{"msgid", "params"}``, is written in words there and kept as it is in the event's
    data, beside ``data``. ``msgid=None`` writes no event (the caller's own event says it).
    Idempotent: nothing left to release, nothing written. Returns how many were released."""
    if rows is None:
        rows = Allocation.objects.filter(job=job, released_at__isnull=True)
    values = {"released_at": timezone.now()}
    if reason:
        values["release_reason"] = reason[:200]
    count = rows.update(**values)
    if count and msgid is not None:
        params = {"count": count, **({"reason": reason} if params is None else params)}
        words = {
            k: v["msgid"] % v["params"] if isinstance(v, dict) and "msgid" in v else v
            for k, v in params.items()
        }
        record_job_events(
            [
                JobEvent(
                    **({"job": job} if isinstance(job, Job) else {"job_id": job}),
                    kind=JobEvent.Kind.RELEASED,
                    message=msgid % words,
                    actor_label=actor_fields(actor)["actor_label"],
                    data={"msgid": msgid, "params": params, **(data or {})},
                )
            ]
        )
    return count


@transaction.atomic
def allocation_move(*, allocation_id: int, device_id: int) -> tuple[Allocation | None, list[int]]:
    """Move an active allocation to another card, e.g. the card a device plugin really gave the pod
    (telemetry read-back, issue 18). The two cards are locked in primary-key order and the target's
    room is re-checked with the same rules as a placement; the row keeps its job, replica, share and
    start, so usage, attribution and bills follow the new card. Returns ``(allocation, [])`` when it
    moved (or already was there), ``(None, holders)`` when the card has no room for it — ``holders``
    are the other jobs with active allocations on it — and ``(None, [])`` when the allocation is no
    longer active or the card does not exist."""
    from apps.catalog.selectors import coefficients_on

    current = Allocation.objects.filter(pk=allocation_id, released_at__isnull=True).values_list(
        "device_id", flat=True
    )
    source = current.first()
    if source is None:
        return None, []
    caps = locked_device_caps(sorted({source, device_id}))
    alloc = Allocation.objects.select_for_update().filter(pk=allocation_id, released_at__isnull=True).first()
    if alloc is None or device_id not in caps or alloc.device_id != source:
        return None, []
    if alloc.device_id == device_id:
        return alloc, []
    cap, factor = caps[device_id][0], caps[device_id][1]
    usage = device_usage([device_id]).get(device_id, [0, 0, 0, 0])
    memory = cap if alloc.whole_card else alloc.memory_mib
    if not _fits(
        usage,
        memory_cap=cap,
        whole=alloc.whole_card,
        memory=memory,
        compute=alloc.compute_milli,
        isolation=alloc.isolation,
        factor=factor,
    ) or (alloc.mig_start is not None and _mig_move_conflict(alloc, device_id)):
        holders = Allocation.objects.filter(device_id=device_id, released_at__isnull=True).values_list(
            "job_id", flat=True
        )
        return None, sorted(set(holders) - {alloc.job_id})
    model_id = caps[device_id][3]
    if model_id != caps[alloc.device_id][3]:
        coefficients = coefficients_on(
            [model_id] if model_id else [], on=timezone.localdate(alloc.started_at)
        )
        alloc.compute_units = allocation_compute_units(coefficients.get(model_id), alloc.compute_milli)
    alloc.device_id, alloc.node_id, alloc.memory_mib = device_id, caps[device_id][2], memory
    alloc.save(update_fields=["device", "node", "memory_mib", "compute_units"])
    return alloc, []


def _mig_move_conflict(alloc: Allocation, device_id: int) -> bool:
    """Whether a MIG instance moved to ``device_id`` at its start slot collides with that card's
    active instances (the geometry check of ``_mig_conflict``, for one moved row)."""
    from apps.catalog.mig import device_geometry, valid_layout

    layout = [(alloc.partition_profile, alloc.mig_start)] + list(
        Allocation.objects.filter(device_id=device_id, released_at__isnull=True, mig_start__isnull=False)
        .exclude(pk=alloc.pk)
        .values_list("partition_profile", "mig_start")
    )
    card = Device.objects.filter(pk=device_id).values_list(
        "device_model__name", "raw_model_name", "mig_profiles"
    )
    model_name, raw_name, listing = card.get()
    geometry = device_geometry(model_name or raw_name or "", listing)
    return geometry is None or valid_layout(geometry, layout) is not None
