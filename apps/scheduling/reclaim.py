"""Reclaim and preemption, after a cycle persisted (only for projects with quotas).

Lenders get their guarantee back and higher priority wins inside a project: ``_reclaim`` (called by
``apps.scheduling.services.scheduling_cycle_run``) preempts through the job lifecycle and places the
job that made room at once, under the usual locks (``apps.scheduling.persist``).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from decimal import Decimal

from apps.catalog.models import DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core.stored_text import stored
from apps.inventory.models import Device, Node
from apps.jobs.models import ACTIVE_STATES, QUEUED_STATES, Job
from apps.quotas.book import device_classes, quota_context
from apps.scheduling.allocations import allocation_compute_units
from apps.scheduling.engine.engine import Engine
from apps.scheduling.engine.model import WHOLE, CapacityError, Decision, Snapshot
from apps.scheduling.persist import CycleResult, _persist
from apps.scheduling.prechecks import Prechecks, job_vendors
from apps.scheduling.proposals import place_or_refuse
from apps.scheduling.resource_requests import job_requests

# Texts stored in state reasons and trace steps, shown in the reader's language (apps.core.stored_text).
RECLAIMED_FOR_LENDER = stored(
    "reclaimed: a lender needs its guarantee back (borrowed capacity is preemptible)"
)
PREEMPTED_FOR = stored("preempted for higher-priority job %(job)s")
RECLAIMED_BY = stored(
    "reclaimed by project %(project)s: it needs its guarantee back (borrowed capacity is preemptible)"
)
MADE_ROOM = stored("preempted %(count)s job(s) to make room: %(jobs)s")

MAX_RECLAIM_JOBS = 20  # pending jobs considered for reclaim per cycle
MAX_VICTIMS = 16  # victims one pending job may preempt


class _Preempter:
    """Preempts jobs through the lifecycle and takes them out of the quota book; remembers whom."""

    def __init__(self, book, actor) -> None:
        self.book = book
        self.actor = actor
        self.done: list[int] = []

    def __call__(self, job_ids: list[str], reason: str) -> None:
        from apps.scheduling.lifecycle import job_preempt

        jobs = Job.objects.filter(pk__in=[int(j) for j in job_ids], state__in=ACTIVE_STATES).select_related(
            "project"
        )
        for victim in jobs.order_by("pk"):
            if job_preempt(job=victim, reason=reason, actor=self.actor):
                self.done.append(victim.pk)
            self.book.release(str(victim.pk))


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
    ctx = quota_context()
    book = ctx.book
    preempt = _Preempter(book, actor)

    # 1. uncovered borrowed use
    for resource_class in sorted(book.by_class):
        victims = book.reclaim_victims(resource_class)
        if victims:
            preempt(victims, RECLAIMED_FOR_LENDER)
    if snapshot is None or engine is None:
        return preempt.done
    for pk in preempt.done:
        with contextlib.suppress(CapacityError):  # not in this snapshot (placed by another cycle)
            snapshot.release(str(pk))

    # 2. pending jobs of limited projects
    candidates = _reclaim_candidates(outcomes, ctx, result)
    if not candidates:
        return preempt.done
    room = _Room(ctx, snapshot.copy())
    for job, position in candidates:
        _make_room(room, job, position, engine=engine, preempt=preempt, cycle_id=cycle_id, result=result)
    return preempt.done


def _reclaim_candidates(outcomes, ctx, result: CycleResult) -> list[tuple[Job, int]]:
    """The cycle's pending jobs of projects with quotas, still queued, at most MAX_RECLAIM_JOBS."""
    placed = set(result.placed_job_ids)
    candidates = [
        (job, position)
        for job, _d, _cu, position in outcomes
        if job.pk not in placed and ctx.limited(job.project_id)
    ]
    if not candidates:
        return []
    still_queued = set(
        Job.objects.filter(pk__in=[j.pk for j, _p in candidates], state__in=QUEUED_STATES).values_list(
            "pk", flat=True
        )
    )
    return [(j, p) for j, p in candidates if j.pk in still_queued][:MAX_RECLAIM_JOBS]


class _Room:
    """What making room reads once per cycle: the working copy of the snapshot, the cards' classes,
    the prechecks, the catalog and its coefficients, and which project each holding job is of."""

    def __init__(self, ctx, work: Snapshot) -> None:
        self.ctx = ctx
        self.book = ctx.book
        self.work = work
        self.devices = {
            str(pk): (vendor, model_id, pool_id)
            for pk, vendor, model_id, pool_id in Device.objects.values_list(
                "pk", "vendor", "device_model_id", "node__pool_id"
            )
        }
        self.prechecks = Prechecks(list(Node.objects.exclude(status=Node.Status.RETIRED)))
        self.catalog = list(DeviceModel.objects.all())
        self.coefficients = coefficients_on([m.pk for m in self.catalog])
        self.project_of = dict(
            Job.objects.filter(pk__in=[int(j) for j in self.book.holdings]).values_list("pk", "project_id")
        )

    def admissible(self, job: Job, decision: Decision, *, commit: bool = False) -> bool:
        """The placement passes the project's quota in the book without the victims (and is held in
        the book when ``commit``, so the next pending job sees it)."""
        amounts: dict[str, list[Decimal]] = defaultdict(list)
        for part in decision.placement.parts:
            for a in part.devices:
                vendor, model_id, pool_id = self.devices.get(str(a.device_id), ("", None, None))
                key = self.ctx.row_for(job.project_id, device_classes(vendor, model_id, pool_id))
                if key is None:
                    return False
                amounts[key].append(
                    allocation_compute_units(self.coefficients.get(model_id), WHOLE if a.whole else a.compute)
                )
        for key, values in amounts.items():
            if not self.book.admit(key, values).admitted:
                return False
        if commit:
            for key, values in amounts.items():
                self.book.admit(
                    key, values, commit=True, job=str(job.pk), priority=job.priority, started=time.time()
                )
        return True

    def victim_order(self, job: Job, requests_) -> list[str]:
        """Whom the job may preempt, in order: other projects' borrowing jobs (when the job fits in
        its project's remaining guarantee), then lower-priority jobs of its own project; lowest
        priority then newest first, at most MAX_VICTIMS."""
        from apps.quotas.admission import reclaim_order

        book = self.book
        rows = self.ctx.project_rows.get(job.project_id, {})
        free = max(
            (book.rows[k].guaranteed - book.g[k] for k in rows.values()),
            default=Decimal(0),
        )
        need = requests_[0][1] or job.requested_cu or Decimal(0)
        lender = need > 0 and need <= free
        holdings = {j: hs for j, hs in book.holdings.items() if int(j) != job.pk}

        def order(j):
            return reclaim_order(holdings[j][0].priority, holdings[j][0].started)

        borrowers = (
            sorted(
                (
                    j
                    for j, hs in holdings.items()
                    if self.project_of.get(int(j)) != job.project_id and any(h.borrowed > 0 for h in hs)
                ),
                key=order,
            )
            if lender
            else []
        )
        lower = sorted(
            (
                j
                for j, hs in holdings.items()
                if self.project_of.get(int(j)) == job.project_id and hs[0].priority < job.priority
            ),
            key=order,
        )
        return (borrowers + lower)[:MAX_VICTIMS]


def _make_room(room: _Room, job: Job, position: int, *, engine: Engine, preempt, cycle_id, result) -> None:
    """Try the victims one more at a time on the working snapshot until the job fits (and its quota
    admits it); then preempt them and place the job. Nothing fits: the snapshot and book are restored."""
    requests_ = job_requests(
        job,
        precheck_failures=room.prechecks.failures(job, job_vendors(job)),
        catalog=room.catalog,
        coefficients=room.coefficients,
    )
    if not requests_:
        return
    order = room.victim_order(job, requests_)
    if not order:
        return
    work, book = room.work, room.book
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
            if decision.placed and room.admissible(job, decision):
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
        return
    victim_ids = [v for v, _p, _h in released]
    own = [v for v in victim_ids if room.project_of.get(int(v)) == job.project_id]
    reason = (
        PREEMPTED_FOR % {"job": f"{job.project.slug}/{job.name}"}
        if own and len(own) == len(victim_ids)
        else RECLAIMED_BY % {"project": job.project.slug}
    )
    preempt(victim_ids, reason)
    decision, granted = chosen
    decision.step("quota", MADE_ROOM % {"count": len(victim_ids), "jobs": ", ".join(victim_ids)})
    room.admissible(job, decision, commit=True)
    before = result.placed
    _persist(
        [(job, decision, granted, position)],
        snapshot=work,
        cycle_id=cycle_id,
        actor=preempt.actor,
        result=result,
    )
    if result.placed > before:
        result.pending -= 1
