"""Persisting a scheduling cycle's decisions: allocations written under row locks.

The engine decides on an in-memory snapshot; persistence re-checks every touched card's totals
inside ``SELECT … FOR UPDATE`` (jobs first, then devices, each in primary-key order, so concurrent
cycles never deadlock) before inserting. A placement that lost a race is dropped, traced as
"conflict" and retried next cycle. Database constraints back this up (one active whole-card
allocation per device, share and memory bounds per row).

``_persist`` takes one batch of the cycle's outcomes through named steps: lock and read
(``_lock_and_read``), decide each job's rows (``_persist_outcome``: still queued? placed? the cards
claimed? its objects rendered? admitted by its quota?), then write the batch (``_write_batch``).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, Value, When
from django.utils import timezone

from apps.catalog.models import DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core.audit import actor_fields
from apps.core.bulk import among, copy_create, unsaved
from apps.core.errors import ValidationFailed
from apps.core.stored_text import stored
from apps.inventory.models import Cluster, Device, Node
from apps.jobs.events import record_job_events
from apps.jobs.models import QUEUED_STATES, Allocation, Job, JobEvent, JobState
from apps.quotas.book import quota_context
from apps.quotas.models import Quota
from apps.quotas.selectors import quotas_configured
from apps.quotas.services import placement_admit
from apps.scheduling.allocations import (
    allocation_compute_units,
    allocation_row,
    claim_placement,
    device_usage,
    locked_devices,
)
from apps.scheduling.engine.model import WHOLE, Decision, Snapshot
from apps.scheduling.models import DecisionTrace

# Texts stored in events, reasons and trace steps, shown in the reader's language (apps.core.stored_text).
CONFLICT = stored("another scheduling cycle took this capacity first; retrying next cycle")
QUOTA_REASON = stored("quota: %(reason)s")
BORROWED = stored("beyond the guarantee: %(cu)s CU borrowed from idle lendable capacity (preemptible)")
SCHEDULED_ON = stored("scheduled on %(nodes)s")
SCHEDULED_ON_CROSS = stored("scheduled on %(nodes)s (cross-node)")
RENDER_FAILED = stored("placed, but its Kubernetes objects could not be rendered (%(error)s); kept pending")

logger = logging.getLogger(__name__)


@dataclass
class CycleResult:
    cycle_id: uuid.UUID
    considered: int = 0
    placed: int = 0
    pending: int = 0
    conflicts: int = 0
    engine_seconds: float = 0.0
    persist_seconds: float = 0.0
    placed_job_ids: list[int] = field(default_factory=list)
    quota_pending: int = 0
    preempted: list[int] = field(default_factory=list)
    parked: int = 0  # pending jobs not re-examined: nothing they could use changed (queueing hints)
    snapshot_rebuilt: bool = True
    # filled by _persist for the queueing hints
    pending_fit_ids: list[int] = field(default_factory=list)
    pending_quota_ids: list[int] = field(default_factory=list)
    pending_error_ids: list[int] = field(default_factory=list)  # objects could not be rendered
    reason_written_at: dict[int, object] = field(default_factory=dict)
    released_in_cycle: list[object] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "cycle_id": str(self.cycle_id),
            "considered": self.considered,
            "placed": self.placed,
            "pending": self.pending,
            "conflicts": self.conflicts,
            "quota_pending": self.quota_pending,
            "preempted": len(self.preempted),
            "parked": self.parked,
            "snapshot_rebuilt": self.snapshot_rebuilt,
            "engine_seconds": round(self.engine_seconds, 4),
            "persist_seconds": round(self.persist_seconds, 4),
        }


def _lock_quota_rows() -> None:
    """``SELECT … FOR UPDATE`` every quota row, in primary-key order (the order quota_context takes
    them in, so taking them again there waits for nothing)."""
    list(Quota.objects.select_for_update(of=("self",)).order_by("pk").values_list("pk", flat=True))


@dataclass
class _Batch:
    """One persist batch: what was locked and read under the locks, and the rows to write."""

    label: str
    locked: dict[int, tuple[str, int]]  # job pk → (state, attempt) as locked
    caps: dict[int, tuple]
    quota_ctx: Any
    usage: dict
    now: dt.datetime
    coefficients: dict
    render: _RenderContext
    allocations: list[Allocation] = field(default_factory=list)
    pushes: list[tuple] = field(default_factory=list)  # (job, cluster, objects) of the placed jobs
    traces: list[DecisionTrace] = field(default_factory=list)
    events: list[JobEvent] = field(default_factory=list)
    scheduled_ids: list[int] = field(default_factory=list)
    pending_updates: dict[int, tuple[str, uuid.UUID]] = field(default_factory=dict)

    def keep_pending(self, job: Job, trace: DecisionTrace, message: str, data: dict) -> None:
        """The job stays pending with a new reason: its trace, a PENDING event, the reason to write."""
        self.traces.append(trace)
        self.events.append(
            _event(job, kind=JobEvent.Kind.PENDING, message=message[:1000], actor_label=self.label, data=data)
        )
        self.pending_updates[job.pk] = (message[:500], trace.trace_id)


@transaction.atomic
def _persist(outcomes, *, snapshot: Snapshot, cycle_id, actor, result: CycleResult) -> None:
    batch = _lock_and_read(outcomes, actor)
    for job, decision, cu, position in outcomes:
        _persist_outcome(
            batch, job, decision, cu, position, snapshot=snapshot, cycle_id=cycle_id, result=result
        )
    _write_batch(batch, result)
    batch.render.log_refusals()


def _lock_and_read(outcomes, actor) -> _Batch:
    job_ids = [job.pk for job, *_ in outcomes]
    # Lock order: jobs, then every quota row, then devices, each by primary key.
    locked = {
        pk: (state, attempt)
        for pk, state, attempt in Job.objects.select_for_update()
        .filter(among("pk", job_ids))
        .order_by("pk")
        .values_list("pk", "state", "attempt")
    }
    placed = [(job, d, cu, pos) for job, d, cu, pos in outcomes if d.placed]
    limited = bool(placed) and quotas_configured()
    if limited:  # admissions against quotas are serialized by these row locks
        _lock_quota_rows()
    device_ids = sorted(
        {int(a.device_id) for _j, d, _c, _p in placed for part in d.placement.parts for a in part.devices}
    )
    caps, devices = locked_devices(device_ids)
    # Every lock is ours: read the quota holdings and the device totals now (a release that committed
    # while we waited is seen), and only then stamp the time. An allocation must not start before the
    # reads that admitted it: stamped before the lock waits, started_at fell before the released_at of
    # capacity that was still in use when it was stamped, and a replay of the intervals showed a
    # project at twice its quota (apps.scheduling.invariants).
    quota_ctx = quota_context(lock=True, now=timezone.now()) if limited else None  # rows already ours
    usage = device_usage(device_ids) if device_ids else {}
    now = timezone.now()
    coefficients = coefficients_on({c[3] for c in caps.values() if c[3]}, on=timezone.localdate(now))
    return _Batch(
        label=actor_fields(actor)["actor_label"],
        locked=locked,
        caps=caps,
        quota_ctx=quota_ctx,
        usage=usage,
        now=now,
        coefficients=coefficients,
        render=_RenderContext(devices),
    )


def _drop(result: CycleResult, snapshot: Snapshot, decision: Decision) -> None:
    """The placement is not written: its cards go back to the cycle's snapshot."""
    result.released_in_cycle.append(snapshot.release(decision.request_id))


def _pending_trace(trace: DecisionTrace, reason: str, position: int) -> None:
    """A placed decision kept pending after all (render or quota): the trace says so."""
    trace.outcome = DecisionTrace.Outcome.PENDING
    trace.explanation = reason
    trace.queue_position = position
    trace.placement = None


def _persist_outcome(
    batch: _Batch, job: Job, decision: Decision, cu, position: int, *, snapshot, cycle_id, result
) -> None:
    """One job's outcome: kept pending with its reason, dropped (cancelled meanwhile, a lost race), or
    its allocations, objects, trace and SCHEDULED event added to the batch."""
    trace = _trace(job, decision, cycle_id=cycle_id, position=position)
    state = batch.locked.get(job.pk, (None, None))[0]
    if state not in QUEUED_STATES:
        if decision.placed:
            _drop(result, snapshot, decision)
        return  # cancelled (or scheduled by another cycle) meanwhile
    # The attempt as locked now: the job may have been placed, preempted and requeued (attempt + 1)
    # by other cycles since this one loaded it; its allocation slots must use the current attempt.
    job.attempt = batch.locked[job.pk][1]
    if not decision.placed:
        result.pending += 1
        result.pending_fit_ids.append(job.pk)
        if job.state_reason != decision.explanation[:500]:
            batch.keep_pending(job, trace, decision.explanation, {"trace_id": decision.trace_id})
        return
    # Re-check every card of this placement against the locked, current totals.
    claimed = claim_placement(decision, batch.usage, batch.caps)
    if claimed is None:
        _drop(result, snapshot, decision)
        result.conflicts += 1
        trace.outcome = DecisionTrace.Outcome.CONFLICT
        trace.explanation = CONFLICT
        batch.traces.append(trace)
        return
    trial, rows = claimed
    job_allocations = [
        allocation_row(
            job,
            pk,
            a,
            caps=batch.caps,
            replica=replica,
            coefficients=batch.coefficients,
            trace_id=trace.trace_id,
            now=batch.now,
        )
        for replica, pk, a in rows
    ]
    # Render the job's objects now: a placement no manifest can express (a bug, or a shape a plugin
    # mode cannot take) keeps this one job pending with the reason, and the rest of the cycle goes on.
    push, error = batch.render.objects(job, job_allocations)
    if push is None:
        _drop(result, snapshot, decision)
        result.pending += 1
        result.pending_error_ids.append(job.pk)
        reason = (RENDER_FAILED % {"error": error})[:500]
        if job.state_reason != reason:
            _pending_trace(trace, reason, position)
            batch.keep_pending(
                job, trace, reason, {"trace_id": decision.trace_id, "render_error": error[:500]}
            )
        return
    flags = _quota_flags(batch, job, decision, trace, rows, position, snapshot=snapshot, result=result)
    if flags is None:
        return
    batch.usage.update(trial)
    for allocation, borrowed in zip(job_allocations, flags, strict=True):
        allocation.borrowed = borrowed  # manifests do not depend on it (rendered above)
    batch.allocations.extend(job_allocations)
    batch.pushes.append(push)
    batch.traces.append(trace)
    batch.scheduled_ids.append(job.pk)
    nodes = ", ".join(decision.placement.nodes)
    batch.events.append(
        _event(
            job,
            kind=JobEvent.Kind.STATE,
            from_state=state,
            to_state=JobState.SCHEDULED,
            message=(SCHEDULED_ON_CROSS if decision.cross_node else SCHEDULED_ON) % {"nodes": nodes},
            actor_label=batch.label,
            data={"trace_id": decision.trace_id, "compute_units": str(cu) if cu is not None else None},
        )
    )
    result.placed += 1
    result.placed_job_ids.append(job.pk)


def _quota_flags(
    batch: _Batch, job: Job, decision: Decision, trace, rows, position: int, *, snapshot, result
) -> list[bool] | None:
    """Per allocation row, whether it borrows beyond the project's guarantee; None when the project's
    quota refuses the placement (the job stays pending with the quota's reason)."""
    flags = [False] * len(rows)
    if batch.quota_ctx is None or not batch.quota_ctx.limited(job.project_id):
        return flags
    caps, coefficients = batch.caps, batch.coefficients
    items = [
        (
            caps[pk][4],
            caps[pk][3],
            caps[pk][5],
            allocation_compute_units(coefficients.get(caps[pk][3]), WHOLE if a.whole else a.compute),
            caps[pk][0] if a.whole else a.memory_mib,
        )
        for _replica, pk, a in rows
    ]
    verdict = placement_admit(batch.quota_ctx, job=job, items=items, started=batch.now.timestamp())
    if not verdict.admitted:
        _drop(result, snapshot, decision)
        result.pending += 1
        result.quota_pending += 1
        result.pending_quota_ids.append(job.pk)
        reason = (QUOTA_REASON % {"reason": verdict.reason})[:500]
        if job.state_reason != reason:
            _pending_trace(trace, reason, position)
            trace.steps = [*trace.steps, {"tier": "quota", "message": verdict.reason, "data": verdict.data}]
            batch.keep_pending(job, trace, reason, {"trace_id": decision.trace_id, "quota": verdict.data})
        return None
    if any(verdict.borrowed):
        trace.steps = [
            *trace.steps,
            {
                "tier": "quota",
                "message": BORROWED % {"cu": verdict.data.get("borrowed_cu")},
                "data": verdict.data,
            },
        ]
    return verdict.borrowed


def _write_batch(batch: _Batch, result: CycleResult) -> None:
    """Write the batch: allocations, push actions, traces and events, then the jobs' new states."""
    # COPY, not bulk_create: at 10,000 nodes the UNNEST inserts were most of the persist time
    # (apps.core.bulk); nothing reads the new rows' keys.
    copy_create(batch.allocations)
    from apps.clusters.outbox import push_actions_enqueue_rendered

    push_actions_enqueue_rendered(batch.pushes)
    copy_create(batch.traces)
    record_job_events(batch.events, copy=True)
    now, scheduled_ids, pending_updates = batch.now, batch.scheduled_ids, batch.pending_updates
    if scheduled_ids:
        trace_by_job = {
            int(t.job_id): t.trace_id for t in batch.traces if t.outcome == DecisionTrace.Outcome.PLACED
        }
        # One conditional UPDATE for the batch: only jobs still queued move (they are locked).
        _update_queued(
            {pk: (trace_by_job[pk],) for pk in scheduled_ids},
            ("last_trace_id",),
            state=JobState.SCHEDULED,
            state_reason="",
            state_changed_at=now,
            updated_at=now,
        )
    if pending_updates:
        _update_queued(
            {pk: (reason, trace) for pk, (reason, trace) in pending_updates.items()},
            ("state_reason", "last_trace_id"),
            updated_at=now,
        )
        for pk in pending_updates:
            result.reason_written_at[pk] = now


def _update_queued(values: dict[int, tuple], columns: tuple[str, ...], **fixed) -> None:
    """Set ``columns`` per job (``values``: pk → one value per column) and ``fixed`` on every job of
    ``values`` that is still queued, in one statement. On PostgreSQL the per-job values travel as
    arrays (``UPDATE … FROM unnest(…)``): a ``CASE WHEN`` per job cost more Python than the rows' COPY."""
    if connection.vendor != "postgresql":  # the SQLite demo
        Job.objects.filter(pk__in=list(values), state__in=QUEUED_STATES).update(
            **fixed,
            **{
                column: Case(*[When(pk=pk, then=Value(row[i])) for pk, row in values.items()])
                for i, column in enumerate(columns)
            },
        )
        return
    meta = Job._meta
    fields = [meta.get_field(name) for name in (*fixed, *columns)]
    names = [f.column for f in fields]
    sets = [f"{names[i]} = %s" for i in range(len(fixed))]
    sets += [f"{name} = v.{name}" for name in names[len(fixed) :]]
    types = ["bigint", *(f.db_type(connection) for f in fields[len(fixed) :])]
    arrays = ", ".join(f"%s::{t.split('(')[0]}[]" for t in types)
    sql = (
        f"UPDATE {meta.db_table} AS j SET {', '.join(sets)} "  # noqa: S608 - names from the model
        f"FROM unnest({arrays}) AS v(id, {', '.join(names[len(fixed) :])}) "
        "WHERE j.id = v.id AND j.state = ANY(%s)"
    )
    params = [f.get_db_prep_save(v, connection) for f, v in zip(fields, fixed.values(), strict=False)]
    params.append(list(values))
    params += [[row[i] for row in values.values()] for i in range(len(columns))]
    params.append([str(s) for s in QUEUED_STATES])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _event(job: Job, **values) -> JobEvent:
    """``JobEvent(job=job, **values)``, built by position (``unsaved``): one per job of the cycle."""
    event = unsaved(JobEvent, job_id=job.pk, **values)
    _EVENT_JOB.set_cached_value(event, job)
    return event


_EVENT_JOB = JobEvent._meta.get_field("job")
_DEVICE = Allocation._meta.get_field("device")
_NODE = Allocation._meta.get_field("node")
_MODEL = Device._meta.get_field("device_model")
_NODE_COLUMNS = tuple(
    f.attname for f in Node._meta.concrete_fields if f.attname in ("id", "name", "cluster_id")
)


class _RenderContext:
    """The cards (as locked), nodes and clusters of one persist batch, for rendering each placed job's
    objects (``apps.clusters.outbox.push_objects``) before anything is written."""

    def __init__(self, devices: dict[int, Device]) -> None:
        # The cards as locked (``locked_devices``); the few clusters are read once, not joined per node.
        self.devices = devices
        # Their few catalog models, read once and shared (the Ascend renderer reads them per job else).
        models = DeviceModel.objects.in_bulk({d.device_model_id for d in self.devices.values()} - {None})
        for device in self.devices.values():
            if device.device_model_id:
                _MODEL.set_cached_value(device, models[device.device_model_id])
        # Rendering reads a node's name (and cluster), read with the cards: a node is loaded as
        # ``only("name", "cluster_id")`` would load it (any other column is read if it is ever used).
        self.nodes: dict[int, Node] = {}
        for d in devices.values():
            if d.node_id not in self.nodes:
                row = {"id": d.node_id, "name": d.cap_node_name, "cluster_id": d.cap_cluster}
                values = [row[name] for name in _NODE_COLUMNS]  # from_db: in the model's field order
                self.nodes[d.node_id] = Node.from_db(d._state.db, _NODE_COLUMNS, values)
        clusters = Cluster.objects.in_bulk({n.cluster_id for n in self.nodes.values()})
        for node in self.nodes.values():
            node.cluster = clusters[node.cluster_id]
        self.refused: dict[str, list[int]] = {}  # why → the jobs whose objects a renderer refused

    def log_refusals(self) -> None:
        """One warning per reason for the batch's refused jobs (a line per job was a tenth of a
        10,000-node cycle's persist where a cluster's mode refused a common shape)."""
        for why, jobs in self.refused.items():
            logger.warning("%d job(s) %s: their objects could not be rendered: %s", len(jobs), jobs, why)

    def objects(self, job: Job, allocations: list[Allocation]) -> tuple[tuple | None, str]:
        """``((job, cluster, objects), "")``, or ``(None, why)`` when the job's objects cannot be
        rendered."""
        from apps.clusters.outbox import push_objects

        for allocation in allocations:  # the related caches, set as the descriptors would
            _DEVICE.set_cached_value(allocation, self.devices[allocation.device_id])
            _NODE.set_cached_value(allocation, self.nodes[allocation.node_id])
        cluster = allocations[0].node.cluster
        try:
            return (job, cluster, push_objects(job, allocations, cluster)), ""
        except ValidationFailed as exc:  # a refusal with its reason (a shape the plugin mode cannot take)
            # No traceback: formatting one per refused job was a tenth of a 10,000-node cycle's persist.
            self.refused.setdefault(str(exc), []).append(job.pk)  # logged per batch (``log_refusals``)
            return None, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # one job's rendering must not stop the cycle for every other job
            logger.exception("job %s: its objects could not be rendered", job.pk)
            return None, f"{type(exc).__name__}: {exc}"


def _trace(job: Job, decision: Decision, *, cycle_id, position: int) -> DecisionTrace:
    data = decision.to_dict(rejections=False)  # per-node reasons are O(nodes); not stored
    return unsaved(
        DecisionTrace,
        trace_id=uuid.UUID(decision.trace_id),
        job_id=job.pk,
        cycle_id=cycle_id,
        policy=decision.policy,
        outcome=DecisionTrace.Outcome.PLACED if decision.placed else DecisionTrace.Outcome.PENDING,
        explanation=decision.explanation,
        queue_position=None if decision.placed else position,
        steps=data["steps"],
        candidates=data["candidates"],
        placement=data["placement"],
    )
