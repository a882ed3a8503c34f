"""A node lost to an inference service takes only its replicas there; a released node wakes its jobs.

An inference service spread over several nodes runs as one Deployment per node
(``apps.clusters.manifests.workload_objects``). When one node is quarantined (its NoExecute taint
evicts every pod there) or Kubernetes evicts the service's pods on one node, the service lets go
of the replicas on that node only (``service_nodes_lost``): their allocations become *releasing*
(held until their pods are gone: ``apps.scheduling.releasing``), that node's Deployment is deleted
and the others are applied again unchanged (same names, same templates: their pods keep running,
their cards stay allocated). The replicas lost are placed again at once where there is room —
never on a node the service still runs on, whose Deployment would be recreated (its strategy is
Recreate) — and whatever did not fit is noted with the service's target replica count.

Releasing a node from quarantine (``node_released``, called by ``apps.scheduling.faults.node_moved``)
brings such services back to their target and wakes the pending jobs whose
attempt ended there (the queueing hints re-examine a job whose row changed in the next cycle).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.stored_text import stored
from apps.jobs.models import ACTIVE_STATES, QUEUED_STATES, Allocation, Job, JobEvent
from apps.jobs.services import job_event
from apps.scheduling import scaling

# Texts stored in events and release reasons, shown in the reader's language (apps.core.stored_text).
REPLICAS_LOST = stored(
    "%(count)s replica(s) on %(nodes)s let go (%(reason)s); %(running)s of %(target)s replicas run"
)
REPLICAS_LET_GO = stored("replica on %(nodes)s let go: %(reason)s")
STILL_SHORT = stored("%(running)s of %(target)s replicas run; the others wait for room")
ALREADY_THERE = stored("the service already runs on this node")
NODE_LEFT = stored("the service just lost its replicas on this node")
NODE_BACK = stored("node %(node)s released from quarantine")

# The key of a SCALED event's data that keeps the replica count a service should get back to.
TARGET = "target"


def _note_target(job: Job, *, running: int, target: int, actor: Any, message: str | None = None) -> None:
    job_event(
        job,
        kind=JobEvent.Kind.SCALED,
        message=message or STILL_SHORT % {"running": running, "target": target},
        actor=actor,
        data={"from": running, "to": running, TARGET: target},
    )


def _service_nodes(job: Job) -> list[str]:
    return sorted(set(scaling.serving_allocations(job).values_list("node__name", flat=True)))


def _grow(job: Job, target: int, *, actor: Any, reason: str, lost: tuple[str, ...] = ()) -> int:
    """Place replicas up to ``target`` beside the running ones (never on their nodes, nor now on the
    nodes just ``lost``); note what is still missing. Returns the replicas running."""
    current = scaling.serving_replicas(job)
    if current >= target:
        return current
    avoid = dict.fromkeys(lost, NODE_LEFT) | dict.fromkeys(_service_nodes(job), ALREADY_THERE)
    reached = scaling.replicas_add(job, current, target, actor, reason, avoid=avoid)
    if reached < target:
        _note_target(job, running=reached, target=target, actor=actor)
    return reached


def service_nodes_lost(*, job: Job, nodes: list[str], reason: str, actor: Any) -> bool:
    """An inference service lost ``nodes``: let go of its replicas there only and place them again
    where there is room. False (nothing done) when ``job`` is not an inference service, is no longer
    active, or runs nowhere else — then the caller retries the whole job."""
    if job.kind != Job.Kind.INFERENCE:
        return False
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job.pk).first()
        job.refresh_from_db()
        if job.state not in ACTIVE_STATES:
            return False
        held = scaling.serving_allocations(job)
        # A replica with cards on one of these nodes is lost whole (a pod cannot lose half its cards).
        lost = set(held.filter(node__name__in=nodes).values_list("replica", flat=True))
        survivors = set(held.exclude(replica__in=lost).values_list("replica", flat=True))
        if not lost or not survivors:
            return False
        target = max(_target(job), len(lost | survivors))
        names = ", ".join(sorted(nodes))
        now = timezone.now()
        held.filter(replica__in=lost).update(
            releasing_since=now, release_reason=(REPLICAS_LET_GO % {"nodes": names, "reason": reason})[:200]
        )
        running = len(survivors)
        job.requested_cu = scaling.cu_for_replicas(job.requested_cu, len(lost | survivors), running)
        Job.objects.filter(pk=job.pk).update(replicas=running, requested_cu=job.requested_cu, updated_at=now)
        job.replicas = running
        job_event(
            job,
            kind=JobEvent.Kind.SCALED,
            message=REPLICAS_LOST
            % {"count": len(lost), "nodes": names, "reason": reason, "running": running, "target": target},
            actor=actor,
            data={"from": running + len(lost), "to": running, "lost_on": sorted(nodes), TARGET: target},
        )
        scaling.service_push(job)  # deletes the lost node's Deployment; the others are applied unchanged
        _grow(job, target, actor=actor, reason=reason, lost=tuple(nodes))
    return True


def _target(job: Job) -> int:
    """The replica count a service lost replicas from and is to get back to (0: none outstanding).
    Only the service's latest scaling event counts: scaling it by hand afterwards sets a new count."""
    latest = job.events.filter(kind=JobEvent.Kind.SCALED).order_by("-created_at", "-id").first()
    return int((latest.data or {}).get(TARGET) or 0) if latest else 0


def serving_nodes(jobs: list[Job]) -> dict[int, set[str]]:
    """Per inference service among ``jobs``: the nodes its serving replicas hold cards on. Its pods
    anywhere else (on a node it let go of: evicted, deleted, ending) say nothing about the service."""
    attempts = {job.pk: job.attempt for job in jobs if job.kind == Job.Kind.INFERENCE}
    out: dict[int, set[str]] = {pk: set() for pk in attempts}
    for job_id, attempt, node in Allocation.objects.filter(
        job_id__in=list(attempts), released_at__isnull=True, releasing_since__isnull=True
    ).values_list("job_id", "attempt", "node__name"):
        if attempt == attempts[job_id]:
            out[job_id].add(node)
    return out


def _jobs_with(kind: str, key: str, node: str, states) -> list[int]:
    """Jobs in ``states`` with an event of ``kind`` whose ``data[key]`` lists ``node`` (filtered here:
    the SQLite demo has no JSON containment lookup)."""
    rows = JobEvent.objects.filter(kind=kind, data__has_key=key, job__state__in=states).values_list(
        "job_id", "data"
    )
    return sorted({job_id for job_id, data in rows if node in ((data or {}).get(key) or [])})


def node_released(*, node, actor=None) -> None:
    """``node`` came back from quarantine (``apps.scheduling.faults.node_moved``, in the ledger's
    transaction): the pending jobs whose attempt ended there are woken for the next scheduling cycle,
    and the services that lost replicas there grow back to their target."""
    woken = _jobs_with(JobEvent.Kind.RETRY, "ended_on", node.name, QUEUED_STATES)
    # The queueing hints re-examine a parked job whose row changed (services.UnschedulableQueue).
    Job.objects.filter(pk__in=woken, state__in=QUEUED_STATES).update(updated_at=timezone.now())
    lost_there = _jobs_with(JobEvent.Kind.SCALED, "lost_on", node.name, ACTIVE_STATES)
    for job in Job.objects.filter(pk__in=lost_there).select_related("project").order_by("pk"):
        target = _target(job)
        if target > scaling.serving_replicas(job):
            _grow(job, target, actor=actor or "ledger", reason=NODE_BACK % {"node": node.name})
