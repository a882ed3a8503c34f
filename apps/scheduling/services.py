"""The scheduling cycle: queue → engine decisions → allocations written under row locks.

The engine decides on an in-memory snapshot (this module: the queue order, the queueing hints, the
cycle); persistence re-checks every touched card's totals under row locks before inserting
(``apps.scheduling.persist``); with quotas, reclaim and preemption follow (``apps.scheduling.reclaim``).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from apps.catalog.models import DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core.bulk import among
from apps.core.conf import suanchi_setting
from apps.core.process_state import register_reset
from apps.core.stored_text import stored
from apps.inventory.models import Node
from apps.jobs.models import QUEUED_STATES, Job
from apps.quotas.selectors import quotas_configured
from apps.scheduling.engine.engine import Engine
from apps.scheduling.engine.model import Decision, Snapshot
from apps.scheduling.engine.policies import BEST
from apps.scheduling.persist import (  # noqa: F401 - re-exported: the cycle's texts and result live there
    BORROWED,
    CONFLICT,
    QUOTA_REASON,
    RENDER_FAILED,
    SCHEDULED_ON,
    SCHEDULED_ON_CROSS,
    CycleResult,
    _persist,
)
from apps.scheduling.prechecks import Prechecks, job_vendors
from apps.scheduling.proposals import place_or_refuse
from apps.scheduling.reclaim import (  # noqa: F401 - re-exported: the preemption texts live there
    MADE_ROOM,
    MAX_RECLAIM_JOBS,
    MAX_VICTIMS,
    PREEMPTED_FOR,
    RECLAIMED_BY,
    RECLAIMED_FOR_LENDER,
    _reclaim,
)
from apps.scheduling.resource_requests import job_requests, library_trace_step
from apps.scheduling.snapshot import collector_paused, cycle_snapshot, placement_cards, snapshot_cache

# Texts stored in events, reasons and trace steps, shown in the reader's language (apps.core.stored_text).
NO_MODEL = stored("no device model can provide this request")

DEFAULT_BATCH = 200
logger = logging.getLogger(__name__)


def scheduler_policy() -> str:
    return suanchi_setting("SCHEDULER_POLICY", "")


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
    """The queued jobs in queue order; their project, template (with its model), model and request
    template are attached by ``_with_related`` (shared instances: a few rows, not one per job)."""
    qs = _queued().order_by("-priority", "created_at", "id")
    return qs[:limit] if limit else qs


def _with_related(jobs: list[Job]) -> list[Job]:
    """Attach each job's few related rows, each read once for all the jobs (not joined per job)."""
    fields = {"project": None, "template": None, "device_model": None, "request_template": None}
    for name in fields:
        field = Job._meta.get_field(name)
        wanted = {getattr(j, field.attname) for j in jobs if not field.is_cached(j)} - {None}
        qs = field.related_model.objects.all()
        if name == "template":
            qs = qs.select_related("device_model")
        fields[name] = (field, qs.in_bulk(wanted) if wanted else {})
    for job in jobs:
        for field, rows in fields.values():
            key = getattr(job, field.attname)
            if key is not None and not field.is_cached(job):
                setattr(job, field.name, rows[key])
    return jobs


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
# cache's diff against the database (snapshot.SnapshotCache), so they cover other processes too. A
# placement dropped at persist time (render refused, quota, a lost race) is no such event: it frees
# cards only the jobs examined after it in the same cycle saw as taken, and only those are left
# unparked (``_woken_in_cycle``), so a job refused every cycle does not wake the backlog. A parked
# job keeps its last explanation and trace; it is re-examined (and its explanation refreshed) when
# it is woken, when its own row changes (``updated_at``), and at least every UNSCHEDULABLE_FLUSH_S.
# The order of the jobs that are examined is the same queue order as before (priority, fair share,
# age).

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
register_reset(_HINTS.clear)  # per-process state: one reset hook (apps.core.process_state)


def unschedulable_queue() -> UnschedulableQueue:
    return _HINTS


def queueing_hints_enabled() -> bool:
    return bool(suanchi_setting("QUEUEING_HINTS", True))


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
    # No garbage collection during the cycle (``snapshot.collector_paused``): at 10,000 nodes, full
    # collections traversing the snapshot's 80,000 cards, the jobs and their decisions again and again
    # were a quarter of a cycle, and a 5,000-job cycle leaves fewer than a hundred objects in cycles.
    with collector_paused():
        return _cycle_run(actor=actor, policy=policy, limit=limit, batch=batch)


def _cycle_run(*, actor, policy: str | None, limit: int | None, batch: int) -> CycleResult:
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
                qs = qs.filter(among("pk", examine))  # one array parameter (apps.core.bulk)
            wanted = set(examine)
            loaded = {job.pk: job for job in qs if job.pk in wanted}
        jobs = _with_related([loaded[pk] for pk in examine if pk in loaded])
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
        outcomes, keys = _decide(jobs, engine=engine, snapshot=snapshot, changes=changes, positions=positions)
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


def _decide(jobs: list[Job], *, engine: Engine, snapshot: Snapshot, changes, positions: dict[int, int]):
    """The engine's decision for each job, in queue order, on the cycle's snapshot: the outcomes
    ``(job, decision, compute units, queue position)`` and the queueing-hint keys of the jobs that did
    not fit."""
    prechecks = Prechecks()
    catalog = list(DeviceModel.objects.all())
    coefficients = coefficients_on([m.pk for m in catalog])
    outcomes: list[tuple[Job, Decision, Decimal | None, int]] = []
    keys: dict[int, tuple] = {}
    sharing_memo: dict = {}  # the clusters' sharing gates, read once per cycle
    for job in jobs:
        failures = prechecks.failures(job, job_vendors(job))
        decision = None
        cu = None
        requests_ = job_requests(
            job,
            precheck_failures=failures,
            catalog=catalog,
            coefficients=coefficients,
            sharing_check=sharing_memo,
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
    return outcomes, keys


def _park(hints: UnschedulableQueue, outcomes, keys, *, seq: int, snapshot: Snapshot, result) -> None:
    """Park this cycle's jobs that stayed pending, except those a placement dropped at persist time
    may have let fit (``_woken_in_cycle``): those are examined again next cycle."""
    if result.preempted:  # preemption released cards (the snapshot cache sees which next cycle)
        hints.event((_ANY,))
    by_pk = {job.pk: job for job, *_ in outcomes}
    placed = set(result.placed_job_ids)
    for pk in by_pk:
        hints.parked.pop(pk, None)
    woken = _woken_in_cycle(outcomes, keys, snapshot=snapshot, dropped=result.released_in_cycle)
    for pk in result.pending_fit_ids:
        if pk in placed or pk not in keys or pk in woken:
            continue
        updated = result.reason_written_at.get(pk, by_pk[pk].updated_at)
        hints.park(pk, seq=seq, updated_at=_micros(updated), keys=keys[pk])
    # A job held by quota is not parked: its headroom moves with every placement and release in its
    # department (a lender's own jobs take back what it lent), events the fleet diff does not carry,
    # so it is examined again each cycle (admission only, no placement search) and its reason stays
    # current (the queue board's starved categories read it).
    for pk in result.pending_error_ids:
        if pk in placed:
            continue
        updated = result.reason_written_at.get(pk, by_pk[pk].updated_at)
        hints.park(pk, seq=seq, updated_at=_micros(updated), keys=(_ANY, _RELEASE))


def _woken_in_cycle(outcomes, keys, *, snapshot: Snapshot, dropped) -> set[int]:
    """The jobs of this cycle that did not fit, examined after a placement that was then dropped at
    persist time (render refused, quota, lost race, cancelled) on cards they could use.

    The engine took those cards in queue order, so only the jobs decided after the placement saw
    them as taken. It is no event for anyone else: not for the jobs parked in earlier cycles (the
    placement did not exist when they were examined), nor for the dropped job itself, which stays
    parked with its reason until its row, the fleet or quotas change, cards are really released, or
    the flush interval passes. A fleet-wide event here re-examined the whole backlog every cycle."""
    if not dropped:
        return set()
    order = {decision.request_id: i for i, (_job, decision, *_rest) in enumerate(outcomes)}
    first: dict[tuple, int] = {}  # event key → the earliest queue index of a drop that freed it
    for placement in dropped:
        i = order.get(placement.request_id, -1)  # unknown: as if decided first (wakes more, never less)
        for vendor, model in placement_cards(snapshot, placement):
            for key in (("vendor", vendor), ("model", model), _RELEASE):
                first[key] = min(first.get(key, i), i)
    return {
        job.pk
        for i, (job, *_rest) in enumerate(outcomes)
        if job.pk in keys and any(first.get(key, i) < i for key in keys[job.pk])
    }


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
