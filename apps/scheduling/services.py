"""The scheduling cycle: queue → engine decisions → allocations written under row locks.

The engine decides on an in-memory snapshot; persistence re-checks every touched card's totals
inside ``SELECT … FOR UPDATE`` (jobs first, then devices, each in primary-key order, so concurrent
cycles never deadlock) before inserting. A placement that lost a race is dropped, traced as
"conflict" and retried next cycle. Database constraints back this up (one active whole-card
allocation per device, share and memory bounds per row).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, Q, Value, When
from django.db.models.expressions import RawSQL
from django.utils import timezone

from apps.catalog.models import DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core.audit import actor_fields
from apps.core.bulk import copy_create
from apps.core.stored_text import stored
from apps.inventory.models import Cluster, Device, Node
from apps.jobs.models import ACTIVE_STATES, QUEUED_STATES, Allocation, Job, JobEvent, JobState
from apps.quotas.book import device_classes, quota_context
from apps.quotas.models import Quota
from apps.quotas.selectors import quotas_configured
from apps.quotas.services import placement_admit
from apps.scheduling.allocations import (
    allocation_compute_units,
    allocation_row,
    claim_placement,
    device_usage,
    locked_device_caps,
)
from apps.scheduling.engine.engine import Engine
from apps.scheduling.engine.model import WHOLE, CapacityError, Decision, Snapshot
from apps.scheduling.engine.policies import BEST
from apps.scheduling.models import DecisionTrace
from apps.scheduling.prechecks import Prechecks, job_vendors
from apps.scheduling.proposals import place_or_refuse
from apps.scheduling.requests import job_requests, library_trace_step
from apps.scheduling.snapshot import cycle_snapshot, snapshot_cache

# Texts stored in events, reasons and trace steps, shown in the reader's language (apps.core.stored_text).
NO_MODEL = stored("no device model can provide this request")
CONFLICT = stored("another scheduling cycle took this capacity first; retrying next cycle")
QUOTA_REASON = stored("quota: %(reason)s")
BORROWED = stored("beyond the guarantee: %(cu)s CU borrowed from idle lendable capacity (preemptible)")
SCHEDULED_ON = stored("scheduled on %(nodes)s")
SCHEDULED_ON_CROSS = stored("scheduled on %(nodes)s (cross-node)")
RECLAIMED_FOR_LENDER = stored(
    "reclaimed: a lender needs its guarantee back (borrowed capacity is preemptible)"
)
PREEMPTED_FOR = stored("preempted for higher-priority job %(job)s")
RECLAIMED_BY = stored(
    "reclaimed by project %(project)s: it needs its guarantee back (borrowed capacity is preemptible)"
)
MADE_ROOM = stored("preempted %(count)s job(s) to make room: %(jobs)s")
RENDER_FAILED = stored("placed, but its Kubernetes objects could not be rendered (%(error)s); kept pending")

DEFAULT_BATCH = 200
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


def scheduler_policy() -> str:
    return settings.SUANCHI.get("SCHEDULER_POLICY", "")


def precheck_failures(job: Job, nodes: list[Node] | None = None) -> dict[str, str]:
    """Node name → why the job's runtime requirement cannot run there (empty when none is set)."""
    if nodes is None:
        nodes = list(Node.objects.exclude(status=Node.Status.RETIRED))
    return Prechecks(nodes).failures(job, job_vendors(job))


def _queued():
    return (
        Job.objects.filter(state__in=QUEUED_STATES)
        # a retry waits out its backoff
        .filter(Q(retry_not_before__isnull=True) | Q(retry_not_before__lte=timezone.now()))
    )


def queued_jobs(limit: int | None = None):
    qs = (
        _queued()
        .select_related("project", "template__device_model", "device_model", "request_template")
        .order_by("-priority", "created_at", "id")
    )
    return qs[:limit] if limit else qs


# --------------------------------------------------------------------------------------------------
# queueing hints: pending work that nothing has changed for is not re-examined
#
# kube-scheduler keeps a pod that failed to schedule in its unschedulable queue and moves it back to
# the active queue only when a cluster event its failing plugins registered for happens (node added
# or made schedulable, a pod deleted and its resources freed…), filtered by each plugin's
# QueueingHint; pods that stayed longer than podMaxInUnschedulablePodsDuration (5 min) are flushed
# back regardless. KEP-4247 (kubernetes/enhancements keps/sig-scheduling/4247-queueinghint),
# pkg/scheduler/backend/queue/scheduling_queue.go (flushUnschedulablePodsLeftover),
# https://kubernetes.io/docs/concepts/scheduling-eviction/scheduling-framework/ (EnqueueExtensions).
#
# Here a job that did not fit is parked with the events it listens to: capacity freed on a card of a
# model (or vendor) its requests name, any card freed when its requests name none or when it waited
# on quota, and for every job a fleet or quota change (a node added, patched, uncordoned, a card's
# health or pool changed, a quota or lending window edited). The events come from the snapshot
# cache's diff against the database (snapshot.SnapshotCache), so they cover other processes too, and
# from placements this cycle dropped at persist time. A parked job keeps its last explanation and
# trace; it is re-examined (and its explanation refreshed) when it is woken, when its own row changes
# (``updated_at``), and at least every UNSCHEDULABLE_FLUSH_S. The order of the jobs that are examined
# is the same queue order as before (priority, fair share, age).

UNSCHEDULABLE_FLUSH_S = 300.0  # kube-scheduler's podMaxInUnschedulablePodsDuration default
_ANY = ("any",)
_RELEASE = ("release",)


@dataclass(slots=True)
class _Parked:
    seq: int
    parked_at: float
    updated_at: object
    keys: tuple


class UnschedulableQueue:
    """Parked pending jobs and the last sequence number of each event key (per process)."""

    def __init__(self) -> None:
        self.seq = 0
        self.last: dict[tuple, int] = {}
        self.parked: dict[int, _Parked] = {}

    def clear(self) -> None:
        self.parked.clear()

    def event(self, keys) -> None:
        self.seq += 1
        for key in keys:
            self.last[key] = self.seq

    def freed(self, vendor: str, model: str) -> None:
        self.event((("vendor", vendor), ("model", model), _RELEASE))

    def observe(self, changes) -> None:
        if changes.wakes_all:
            self.event((_ANY,))
        for vendor, model in sorted(changes.freed):
            self.freed(vendor, model)

    def waiting(self, pk: int, updated_at, now: float) -> bool:
        """True when the job stays parked this cycle."""
        entry = self.parked.get(pk)
        if entry is None:
            return False
        if entry.updated_at != updated_at or now - entry.parked_at >= UNSCHEDULABLE_FLUSH_S:
            return False
        last = self.last
        return all(last.get(key, 0) <= entry.seq for key in entry.keys)

    def park(self, pk: int, *, seq: int, updated_at, keys: tuple) -> None:
        self.parked[pk] = _Parked(seq, time.monotonic(), updated_at, keys)


_HINTS = UnschedulableQueue()


def unschedulable_queue() -> UnschedulableQueue:
    return _HINTS


def queueing_hints_enabled() -> bool:
    return bool(settings.SUANCHI.get("QUEUEING_HINTS", True))


def _hint_keys(requests_) -> tuple:
    """The events that may let these requests fit: the models (else vendors) their groups name."""
    keys = {_ANY}
    for request, _granted in requests_:
        for group in request.groups:
            if group.models:
                keys.update(("model", m) for m in group.models)
            elif group.vendors:
                keys.update(("vendor", v) for v in group.vendors)
            else:
                keys.add(_RELEASE)
    return tuple(sorted(keys))


def _placement_cards(snapshot: Snapshot, placement) -> set[tuple[str, str]]:
    out = set()
    for part in placement.parts:
        node = snapshot.by_name.get(part.node)
        if node is None:
            continue
        for a in part.devices:
            with contextlib.suppress(KeyError):
                dev = node.device(a.device_id)
                out.add((dev.vendor, dev.model))
    return out


class _Epoch(float):
    """Seconds since the epoch that answer ``.timestamp()`` like the datetime they stand for."""

    def timestamp(self) -> float:
        return float(self)


class _Queued:
    """A queued job's ordering fields (the whole queue is ordered without loading every job).

    Times come as integer microseconds since the epoch, computed by PostgreSQL: parsing two
    datetimes per row in Python cost more than the rest of a 20,000-job backlog together."""

    __slots__ = ("pk", "id", "priority", "project_id", "created_at", "updated_at")

    def __init__(self, pk, priority, project_id, created_us, updated_us) -> None:
        self.pk = self.id = pk
        self.priority, self.project_id = priority, project_id
        self.created_at, self.updated_at = _Epoch(created_us / 1e6), updated_us


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _micros(value) -> int:
    """A datetime as integer microseconds since the epoch (the form ``_Queued.updated_at`` has)."""
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def _queue_order(limited: bool) -> list[_Queued]:
    table = Job._meta.db_table
    if connection.vendor != "postgresql":  # the SQLite demo: EXTRACT(EPOCH …) is PostgreSQL's
        rows = [
            _Queued(pk, priority, project_id, _micros(created), _micros(updated))
            for pk, priority, project_id, created, updated in _queued()
            .order_by("-priority", "created_at", "id")
            .values_list("id", "priority", "project_id", "created_at", "updated_at")
        ]
        if limited:
            from apps.quotas.selectors import fair_share_order

            rows = fair_share_order(rows)
        return rows
    rows = [
        _Queued(*row)
        for row in _queued()
        .annotate(
            created_us=RawSQL(f"(EXTRACT(EPOCH FROM {table}.created_at) * 1000000)::bigint", ()),  # noqa: S611
            updated_us=RawSQL(f"(EXTRACT(EPOCH FROM {table}.updated_at) * 1000000)::bigint", ()),  # noqa: S611
        )
        .order_by("-priority", "created_at", "id")
        .values_list("id", "priority", "project_id", "created_us", "updated_us")
    ]
    if limited:
        from apps.quotas.selectors import fair_share_order

        rows = fair_share_order(rows)
    return rows


def scheduling_cycle_run(
    *, actor="scheduler", policy: str | None = None, limit: int | None = None, batch: int = DEFAULT_BATCH
) -> CycleResult:
    """One pass over the queue (priority, then fair share, then age). Safe to run concurrently with itself.

    The snapshot is the process's cached one, brought up to date (``snapshot.cycle_snapshot``); jobs
    parked by the queueing hints (above) are skipped until something they could use changes.
    With quotas configured, every placement is admitted against its project's quota under row locks
    (``_persist``), and after persisting, lenders' guaranteed jobs reclaim borrowed capacity and
    higher-priority jobs preempt lower ones of their own project (``_reclaim``).
    """
    result = CycleResult(cycle_id=uuid.uuid4())
    limited = quotas_configured()
    queue = _queue_order(limited)
    if not queue:
        _HINTS.clear()
        if limited:  # a lender may still need its guarantee back (e.g. a lending window closed)
            result.preempted = _reclaim(
                [], snapshot=None, engine=None, actor=actor, cycle_id=result.cycle_id, result=result
            )
        return result
    started = time.perf_counter()
    with cycle_snapshot() as (snapshot, changes):
        hints = _HINTS if changes is not None and queueing_hints_enabled() else None
        result.snapshot_rebuilt = changes is None or changes.rebuilt
        positions: dict[int, int] = {}
        examine: list[int] = []
        if hints is not None:
            hints.observe(changes)
            queued_ids = {row.pk for row in queue}
            for pk in [pk for pk in hints.parked if pk not in queued_ids]:
                del hints.parked[pk]
        now = time.monotonic()
        for position, row in enumerate(queue, start=1):
            if hints is not None and hints.waiting(row.pk, row.updated_at, now):
                result.parked += 1
                continue
            positions[row.pk] = position
            examine.append(row.pk)
        if limit:
            examine = examine[:limit]
        loaded = {}
        if examine:
            qs = queued_jobs()
            if hasattr(qs, "filter"):
                qs = qs.filter(pk__in=examine)
            wanted = set(examine)
            loaded = {job.pk: job for job in qs if job.pk in wanted}
        jobs = [loaded[pk] for pk in examine if pk in loaded]
        result.considered = len(jobs)
        result.pending = result.parked
        if not jobs:
            if limited:
                result.preempted = _reclaim(
                    [], snapshot=None, engine=None, actor=actor, cycle_id=result.cycle_id, result=result
                )
            return result
        seq = hints.seq if hints is not None else 0
        engine = Engine(policy=policy or scheduler_policy() or BEST)
        prechecks = Prechecks()
        catalog = list(DeviceModel.objects.all())
        coefficients = coefficients_on([m.pk for m in catalog])
        outcomes: list[tuple[Job, Decision, Decimal | None, int]] = []
        keys: dict[int, tuple] = {}
        for job in jobs:
            failures = prechecks.failures(job, job_vendors(job))
            decision = None
            cu = None
            requests_ = job_requests(
                job, precheck_failures=failures, catalog=catalog, coefficients=coefficients
            )
            refused = False
            for request, granted in requests_:
                decision, refused = place_or_refuse(engine, snapshot, request)
                cu = granted
                if refused:  # kept pending with the reason, not parked; the batch goes on
                    if changes is not None:
                        snapshot_cache().invalidate()  # next cycle reads the cards from the database
                    break
                if decision.placed:
                    library_trace_step(decision, granted)  # profile requests: the deciding measurement
                    break
            if decision is None:  # no shape at all (e.g. no model with a coefficient): explain
                decision = Decision(uuid.uuid4().hex, str(job.pk), engine.policy.name)
                decision.explanation = NO_MODEL
            elif not decision.placed and not refused:
                keys[job.pk] = _hint_keys(requests_)
            outcomes.append((job, decision, cu, positions[job.pk]))
        result.engine_seconds = time.perf_counter() - started

        started = time.perf_counter()
        for i in range(0, len(outcomes), batch):
            _persist(
                outcomes[i : i + batch],
                snapshot=snapshot,
                cycle_id=result.cycle_id,
                actor=actor,
                result=result,
            )
        result.persist_seconds = time.perf_counter() - started
        if limited:
            result.preempted = _reclaim(
                outcomes,
                snapshot=snapshot,
                engine=engine,
                actor=actor,
                cycle_id=result.cycle_id,
                result=result,
            )
        if hints is not None:
            _park(hints, outcomes, keys, seq=seq, snapshot=snapshot, result=result)
    return result


def _park(hints: UnschedulableQueue, outcomes, keys, *, seq: int, snapshot: Snapshot, result) -> None:
    """Park this cycle's jobs that stayed pending; placements dropped at persist time are events."""
    for placement in result.released_in_cycle:
        for vendor, model in _placement_cards(snapshot, placement):
            hints.freed(vendor, model)
    if result.preempted:  # preemption released cards (the snapshot cache sees which next cycle)
        hints.event((_ANY,))
    by_pk = {job.pk: job for job, *_ in outcomes}
    placed = set(result.placed_job_ids)
    for pk in by_pk:
        hints.parked.pop(pk, None)
    for pk in result.pending_fit_ids:
        if pk in placed or pk not in keys:
            continue
        updated = result.reason_written_at.get(pk, by_pk[pk].updated_at)
        hints.park(pk, seq=seq, updated_at=_micros(updated), keys=keys[pk])
    for pk in [*result.pending_quota_ids, *result.pending_error_ids]:
        if pk in placed:
            continue
        updated = result.reason_written_at.get(pk, by_pk[pk].updated_at)
        hints.park(pk, seq=seq, updated_at=_micros(updated), keys=(_ANY, _RELEASE))


def _lock_quota_rows() -> None:
    """``SELECT … FOR UPDATE`` every quota row, in primary-key order (the order quota_context takes
    them in, so taking them again there waits for nothing)."""
    list(Quota.objects.select_for_update(of=("self",)).order_by("pk").values_list("pk", flat=True))


@transaction.atomic
def _persist(outcomes, *, snapshot: Snapshot, cycle_id, actor, result: CycleResult) -> None:
    label = actor_fields(actor)["actor_label"]
    job_ids = [job.pk for job, *_ in outcomes]
    # Lock order: jobs, then every quota row, then devices, each by primary key.
    locked = {
        pk: (state, attempt)
        for pk, state, attempt in Job.objects.select_for_update()
        .filter(pk__in=job_ids)
        .order_by("pk")
        .values_list("pk", "state", "attempt")
    }
    states = {pk: state for pk, (state, _attempt) in locked.items()}
    placed = [(job, d, cu, pos) for job, d, cu, pos in outcomes if d.placed]
    limited = bool(placed) and quotas_configured()
    if limited:  # admissions against quotas are serialized by these row locks
        _lock_quota_rows()
    device_ids = sorted(
        {int(a.device_id) for _j, d, _c, _p in placed for part in d.placement.parts for a in part.devices}
    )
    caps = locked_device_caps(device_ids)
    # Every lock is ours: read the quota holdings and the device totals now (a release that committed
    # while we waited is seen), and only then stamp the time. An allocation must not start before the
    # reads that admitted it: stamped before the lock waits, started_at fell before the released_at of
    # capacity that was still in use when it was stamped, and a replay of the intervals showed a
    # project at twice its quota (apps.scheduling.invariants).
    quota_ctx = quota_context(lock=True, now=timezone.now()) if limited else None  # rows already ours
    usage = device_usage(device_ids) if device_ids else {}
    now = timezone.now()
    coefficients = coefficients_on({c[3] for c in caps.values() if c[3]}, on=timezone.localdate(now))
    render = _RenderContext(device_ids, caps)

    allocations: list[Allocation] = []
    pushes: list[tuple] = []  # (job, cluster, objects) of the placed jobs, written with them
    traces: list[DecisionTrace] = []
    events: list[JobEvent] = []
    scheduled_ids: list[int] = []
    pending_updates: dict[int, tuple[str, uuid.UUID]] = {}
    for job, decision, cu, position in outcomes:
        trace = _trace(job, decision, cycle_id=cycle_id, position=position)
        if states.get(job.pk) not in QUEUED_STATES:
            if decision.placed:
                result.released_in_cycle.append(snapshot.release(decision.request_id))
            continue  # cancelled (or scheduled by another cycle) meanwhile
        # The attempt as locked now: the job may have been placed, preempted and requeued (attempt + 1)
        # by other cycles since this one loaded it; its allocation slots must use the current attempt.
        job.attempt = locked[job.pk][1]
        if not decision.placed:
            result.pending += 1
            result.pending_fit_ids.append(job.pk)
            if job.state_reason != decision.explanation[:500]:
                traces.append(trace)
                events.append(
                    JobEvent(
                        job=job,
                        kind=JobEvent.Kind.PENDING,
                        message=decision.explanation[:1000],
                        actor_label=label,
                        data={"trace_id": decision.trace_id},
                    )
                )
                pending_updates[job.pk] = (decision.explanation[:500], trace.trace_id)
            continue
        # Re-check every card of this placement against the locked, current totals.
        claimed = claim_placement(decision, usage, caps)
        if claimed is None:
            result.released_in_cycle.append(snapshot.release(decision.request_id))
            result.conflicts += 1
            trace.outcome = DecisionTrace.Outcome.CONFLICT
            trace.explanation = CONFLICT
            traces.append(trace)
            continue
        trial, rows = claimed
        job_allocations = [
            allocation_row(
                job,
                pk,
                a,
                caps=caps,
                replica=replica,
                coefficients=coefficients,
                trace_id=decision.trace_id,
                now=now,
            )
            for replica, pk, a in rows
        ]
        # Render the job's objects now: a placement no manifest can express (a bug, or a shape a plugin
        # mode cannot take) keeps this one job pending with the reason, and the rest of the cycle goes on.
        push, error = render.objects(job, job_allocations)
        if push is None:
            result.released_in_cycle.append(snapshot.release(decision.request_id))
            result.pending += 1
            result.pending_error_ids.append(job.pk)
            reason = (RENDER_FAILED % {"error": error})[:500]
            if job.state_reason != reason:
                trace.outcome = DecisionTrace.Outcome.PENDING
                trace.explanation = reason
                trace.queue_position = position
                trace.placement = None
                traces.append(trace)
                events.append(
                    JobEvent(
                        job=job,
                        kind=JobEvent.Kind.PENDING,
                        message=reason,
                        actor_label=label,
                        data={"trace_id": decision.trace_id, "render_error": error[:500]},
                    )
                )
                pending_updates[job.pk] = (reason, trace.trace_id)
            continue
        flags = [False] * len(rows)
        if quota_ctx is not None and quota_ctx.limited(job.project_id):
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
            verdict = placement_admit(quota_ctx, job=job, items=items, started=now.timestamp())
            if not verdict.admitted:
                result.released_in_cycle.append(snapshot.release(decision.request_id))
                result.pending += 1
                result.quota_pending += 1
                result.pending_quota_ids.append(job.pk)
                reason = (QUOTA_REASON % {"reason": verdict.reason})[:500]
                if job.state_reason != reason:
                    trace.outcome = DecisionTrace.Outcome.PENDING
                    trace.explanation = reason
                    trace.queue_position = position
                    trace.placement = None
                    trace.steps = [
                        *trace.steps,
                        {"tier": "quota", "message": verdict.reason, "data": verdict.data},
                    ]
                    traces.append(trace)
                    events.append(
                        JobEvent(
                            job=job,
                            kind=JobEvent.Kind.PENDING,
                            message=reason,
                            actor_label=label,
                            data={"trace_id": decision.trace_id, "quota": verdict.data},
                        )
                    )
                    pending_updates[job.pk] = (reason, trace.trace_id)
                continue
            flags = verdict.borrowed
            if any(flags):
                trace.steps = [
                    *trace.steps,
                    {
                        "tier": "quota",
                        "message": BORROWED % {"cu": verdict.data.get("borrowed_cu")},
                        "data": verdict.data,
                    },
                ]
        usage.update(trial)
        for allocation, borrowed in zip(job_allocations, flags, strict=True):
            allocation.borrowed = borrowed  # manifests do not depend on it (rendered above)
        allocations.extend(job_allocations)
        pushes.append(push)
        traces.append(trace)
        scheduled_ids.append(job.pk)
        nodes = ", ".join(decision.placement.nodes)
        events.append(
            JobEvent(
                job=job,
                kind=JobEvent.Kind.STATE,
                from_state=states[job.pk],
                to_state=JobState.SCHEDULED,
                message=(SCHEDULED_ON_CROSS if decision.cross_node else SCHEDULED_ON) % {"nodes": nodes},
                actor_label=label,
                data={"trace_id": decision.trace_id, "compute_units": str(cu) if cu is not None else None},
            )
        )
        result.placed += 1
        result.placed_job_ids.append(job.pk)

    # COPY, not bulk_create: at 10,000 nodes the UNNEST inserts were most of the persist time
    # (apps.core.bulk); nothing reads the new rows' keys.
    copy_create(allocations)
    from apps.clusters.outbox import push_actions_enqueue_rendered

    push_actions_enqueue_rendered(pushes)
    copy_create(traces)
    copy_create(events)
    if scheduled_ids:
        trace_by_job = {
            int(t.job_id): t.trace_id for t in traces if t.outcome == DecisionTrace.Outcome.PLACED
        }
        # One conditional UPDATE for the batch: only jobs still queued move (they are locked).
        Job.objects.filter(pk__in=scheduled_ids, state__in=QUEUED_STATES).update(
            state=JobState.SCHEDULED,
            state_reason="",
            state_changed_at=now,
            updated_at=now,
            last_trace_id=Case(*[When(pk=pk, then=Value(trace_by_job[pk])) for pk in scheduled_ids]),
        )
    if pending_updates:
        Job.objects.filter(pk__in=list(pending_updates), state__in=QUEUED_STATES).update(
            state_reason=Case(
                *[When(pk=pk, then=Value(reason)) for pk, (reason, _t) in pending_updates.items()]
            ),
            last_trace_id=Case(
                *[When(pk=pk, then=Value(trace)) for pk, (_r, trace) in pending_updates.items()]
            ),
            updated_at=now,
        )
        for pk in pending_updates:
            result.reason_written_at[pk] = now


class _RenderContext:
    """The cards, nodes and clusters of one persist batch, read in three queries, for rendering each
    placed job's objects (``apps.clusters.outbox.push_objects``) before anything is written."""

    def __init__(self, device_ids: list[int], caps: dict[int, tuple]) -> None:
        # The cards' JSON columns are not rendered; the few clusters are read once, not joined per node.
        self.devices = (
            Device.objects.defer("partitions", "mig_profiles").in_bulk(device_ids) if device_ids else {}
        )
        self.nodes = Node.objects.in_bulk({c[2] for c in caps.values()}) if caps else {}
        clusters = Cluster.objects.in_bulk({n.cluster_id for n in self.nodes.values()})
        for node in self.nodes.values():
            node.cluster = clusters[node.cluster_id]

    def objects(self, job: Job, allocations: list[Allocation]) -> tuple[tuple | None, str]:
        """``((job, cluster, objects), "")``, or ``(None, why)`` when the job's objects cannot be
        rendered."""
        from apps.clusters.outbox import push_objects

        for allocation in allocations:
            allocation.device = self.devices[allocation.device_id]
            allocation.node = self.nodes[allocation.node_id]
        cluster = allocations[0].node.cluster
        try:
            return (job, cluster, push_objects(job, allocations, cluster)), ""
        except Exception as exc:  # one job's rendering must not stop the cycle for every other job
            logger.exception("job %s: its objects could not be rendered", job.pk)
            return None, f"{type(exc).__name__}: {exc}"


def _trace(job: Job, decision: Decision, *, cycle_id, position: int) -> DecisionTrace:
    data = decision.to_dict(rejections=False)  # per-node reasons are O(nodes); not stored
    return DecisionTrace(
        trace_id=uuid.UUID(decision.trace_id),
        job=job,
        cycle_id=cycle_id,
        policy=decision.policy,
        outcome=DecisionTrace.Outcome.PLACED if decision.placed else DecisionTrace.Outcome.PENDING,
        explanation=decision.explanation,
        queue_position=None if decision.placed else position,
        steps=data["steps"],
        candidates=data["candidates"],
        placement=data["placement"],
    )


def queue_position(job: Job) -> int | None:
    """1-based position among queued jobs (priority, then fair share when quotas are configured, then
    age); None when the job is not queued."""
    if job.state not in QUEUED_STATES:
        return None
    if quotas_configured():
        from apps.quotas.selectors import queue_positions

        return queue_positions([job.pk]).get(job.pk)
    ahead = Job.objects.filter(state__in=QUEUED_STATES).filter(
        Q(priority__gt=job.priority)
        | Q(priority=job.priority, created_at__lt=job.created_at)
        | Q(priority=job.priority, created_at=job.created_at, pk__lt=job.pk)
    )
    return ahead.count() + 1


# --------------------------------------------------------------------------------------------------
# reclaim and preemption (only for projects with quotas)

MAX_RECLAIM_JOBS = 20  # pending jobs considered for reclaim per cycle
MAX_VICTIMS = 16  # victims one pending job may preempt


def _reclaim(
    outcomes, *, snapshot: Snapshot | None, engine: Engine | None, actor, cycle_id, result: CycleResult
) -> list[int]:
    """Give lenders their guarantee back and let higher priority win inside a project.

    1. Borrowed use no pool covers any more (a lender's guarantee is in use again, a lending window
       closed) is reclaimed: borrowing jobs, lowest priority first, then newest first.
    2. A pending job of a project with quotas tries, on a copy of the cycle's snapshot, to fit by
       removing (a) other projects' borrowing jobs when the job fits in its project's remaining
       guarantee, then (b) lower-priority jobs of its own project — in that order, lowest priority
       then newest first, as few as needed. When it fits, the victims are preempted
       (``apps.scheduling.lifecycle.job_preempt``: released, objects deleted gracefully, requeued to
       resume from checkpoint) and the job is placed at once, under the usual locks.
    """
    from apps.quotas.admission import reclaim_order
    from apps.scheduling.lifecycle import job_preempt

    ctx = quota_context()
    book = ctx.book
    victims_done: list[int] = []

    def preempt(job_ids: list[str], reason: str) -> None:
        jobs = Job.objects.filter(pk__in=[int(j) for j in job_ids], state__in=ACTIVE_STATES).select_related(
            "project"
        )
        for victim in jobs.order_by("pk"):
            if job_preempt(job=victim, reason=reason, actor=actor):
                victims_done.append(victim.pk)
            book.release(str(victim.pk))

    # 1. uncovered borrowed use
    for resource_class in sorted(book.by_class):
        victims = book.reclaim_victims(resource_class)
        if victims:
            preempt(victims, RECLAIMED_FOR_LENDER)
    if snapshot is None or engine is None:
        return victims_done
    for pk in victims_done:
        with contextlib.suppress(CapacityError):  # not in this snapshot (placed by another cycle)
            snapshot.release(str(pk))

    # 2. pending jobs of limited projects
    placed = set(result.placed_job_ids)
    candidates = [
        (job, position)
        for job, _d, _cu, position in outcomes
        if job.pk not in placed and ctx.limited(job.project_id)
    ]
    if not candidates:
        return victims_done
    still_queued = set(
        Job.objects.filter(pk__in=[j.pk for j, _p in candidates], state__in=QUEUED_STATES).values_list(
            "pk", flat=True
        )
    )
    candidates = [(j, p) for j, p in candidates if j.pk in still_queued][:MAX_RECLAIM_JOBS]
    if not candidates:
        return victims_done
    work = snapshot.copy()
    devices = {
        str(pk): (vendor, model_id, pool_id)
        for pk, vendor, model_id, pool_id in Device.objects.values_list(
            "pk", "vendor", "device_model_id", "node__pool_id"
        )
    }
    nodes = list(Node.objects.exclude(status=Node.Status.RETIRED))
    prechecks = Prechecks(nodes)
    catalog = list(DeviceModel.objects.all())
    coefficients = coefficients_on([m.pk for m in catalog])
    project_of = dict(
        Job.objects.filter(pk__in=[int(j) for j in book.holdings]).values_list("pk", "project_id")
    )

    def admissible(job: Job, decision: Decision, *, commit: bool = False) -> bool:
        """The placement passes the project's quota in the book without the victims (and is held in
        the book when ``commit``, so the next pending job sees it)."""
        amounts: dict[str, list[Decimal]] = defaultdict(list)
        for part in decision.placement.parts:
            for a in part.devices:
                vendor, model_id, pool_id = devices.get(str(a.device_id), ("", None, None))
                key = ctx.row_for(job.project_id, device_classes(vendor, model_id, pool_id))
                if key is None:
                    return False
                amounts[key].append(
                    allocation_compute_units(coefficients.get(model_id), WHOLE if a.whole else a.compute)
                )
        for key, values in amounts.items():
            if not book.admit(key, values).admitted:
                return False
        if commit:
            for key, values in amounts.items():
                book.admit(
                    key, values, commit=True, job=str(job.pk), priority=job.priority, started=time.time()
                )
        return True

    for job, position in candidates:
        requests_ = job_requests(
            job,
            precheck_failures=prechecks.failures(job, job_vendors(job)),
            catalog=catalog,
            coefficients=coefficients,
        )
        if not requests_:
            continue
        rows = ctx.project_rows.get(job.project_id, {})
        free = max(
            (book.rows[k].guaranteed - book.g[k] for k in rows.values()),
            default=Decimal(0),
        )
        need = requests_[0][1] or job.requested_cu or Decimal(0)
        lender = need > 0 and need <= free
        holdings = {j: hs for j, hs in book.holdings.items() if int(j) != job.pk}
        borrowers = (
            sorted(
                (
                    j
                    for j, hs in holdings.items()
                    if project_of.get(int(j)) != job.project_id and any(h.borrowed > 0 for h in hs)
                ),
                key=lambda j: reclaim_order(holdings[j][0].priority, holdings[j][0].started),
            )
            if lender
            else []
        )
        lower = sorted(
            (
                j
                for j, hs in holdings.items()
                if project_of.get(int(j)) == job.project_id and hs[0].priority < job.priority
            ),
            key=lambda j: reclaim_order(holdings[j][0].priority, holdings[j][0].started),
        )
        order = (borrowers + lower)[:MAX_VICTIMS]
        if not order:
            continue
        released: list[tuple[str, object, list]] = []
        chosen = None
        for victim in order:
            try:
                placement = work.release(victim)
            except CapacityError:  # not in the snapshot (placed by another cycle): nothing to free
                placement = None
            released.append((victim, placement, book.release(victim)))
            for request, granted in requests_:
                decision, _refused = place_or_refuse(engine, work, request, commit=False)
                if decision.placed and admissible(job, decision):
                    placed, _refused = place_or_refuse(engine, work, request)
                    chosen = (placed, granted) if placed.placed else None
                    break
            if chosen:
                break
        if chosen is None:
            for _victim, placement, holds in reversed(released):
                if placement is not None:
                    work.apply(placement)
                for h in holds:
                    book.hold(h)
            continue
        victim_ids = [v for v, _p, _h in released]
        own = [v for v in victim_ids if project_of.get(int(v)) == job.project_id]
        reason = (
            PREEMPTED_FOR % {"job": f"{job.project.slug}/{job.name}"}
            if own and len(own) == len(victim_ids)
            else RECLAIMED_BY % {"project": job.project.slug}
        )
        preempt(victim_ids, reason)
        decision, granted = chosen
        decision.step("quota", MADE_ROOM % {"count": len(victim_ids), "jobs": ", ".join(victim_ids)})
        admissible(job, decision, commit=True)
        before = result.placed
        _persist(
            [(job, decision, granted, position)], snapshot=work, cycle_id=cycle_id, actor=actor, result=result
        )
        if result.placed > before:
            result.pending -= 1
    return victims_done
