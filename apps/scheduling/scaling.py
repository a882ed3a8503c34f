"""Scale an inference service: cards are allocated or released with the replicas, never apart.

Scaling up places the extra replicas with the engine on a fresh snapshot (same filters, policies and
precheck as the scheduling cycle), then re-checks every card under row locks before inserting
allocations (the invariants of the cycle hold: no card is over-allocated). Scaling down releases the
highest replicas' allocations. Either way the Deployment is re-applied through the push outbox with
the new replica count and placement. A scale-up that finds no room for every replica takes what fits
and says so (the returned count).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.catalog.models import DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core.errors import InvalidTransition, ValidationFailed
from apps.core.stored_text import localize, stored
from apps.inventory.models import Node
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.jobs.services import job_event
from apps.scheduling.allocations import (
    allocation_row,
    allocations_release,
    claim_placement,
    device_usage,
    locked_device_caps,
)
from apps.scheduling.engine.engine import Engine
from apps.scheduling.engine.policies import BEST
from apps.scheduling.resource_requests import job_requests
from apps.scheduling.snapshot import fleet_snapshot

MAX_REPLICAS = 64


def serving_allocations(job: Job):
    """The serving replicas' allocations (not those let go of and waiting for their pods to end)."""
    return Allocation.objects.filter(
        job=job, attempt=job.attempt, released_at__isnull=True, releasing_since__isnull=True
    )


def _replica_numbers(job: Job) -> list[int]:
    return sorted(set(serving_allocations(job).values_list("replica", flat=True)))


def serving_replicas(job: Job) -> int:
    return len(_replica_numbers(job))


def _next_replica(job: Job) -> int:
    """A number no live row of this attempt uses (replicas lost with a node leave gaps: the
    survivors keep their numbers, which their pods' placement annotation names)."""
    numbers = Allocation.objects.filter(job=job, attempt=job.attempt, released_at__isnull=True).values_list(
        "replica", flat=True
    )
    return max(numbers, default=-1) + 1


def cu_for_replicas(cu, before: int, after: int):
    """The request's CU per hour for ``after`` replicas (it was ``before``): the pages and the quota
    preview show what the job asks for now, not what it asked for at submission."""
    if cu is None or not before:
        return cu
    return (cu * after / before).quantize(cu)


def service_push(job: Job) -> None:
    from apps.clusters.outbox import push_actions_enqueue

    allocations = list(
        serving_allocations(job).select_related("device", "node__cluster").order_by("replica", "device_id")
    )
    if allocations:
        push_actions_enqueue(job=job, allocations=allocations, cluster=allocations[0].node.cluster)


# Refusals: shown in the caller's language (gettext at raise) and also stored by the autoscaler
# (ScaleDecision.error, written in English by the worker), hence registered as stored texts.
NOT_INFERENCE = stored("job %(job)s is a %(kind)s job; only inference services scale")
REPLICAS_RANGE = stored("replicas must be between 1 and %(max)s")
NOT_RUNNING = stored("job %(job)s is %(state)s; only a scheduled or running service scales")


def inference_scale(*, job: Job, replicas: int, actor: Any, reason: str = "") -> int:
    """Bring an inference service to ``replicas`` replicas (1 … 64). Returns the count reached."""
    if job.kind != Job.Kind.INFERENCE:
        raise ValidationFailed(
            _(NOT_INFERENCE) % {"job": job.pk, "kind": job.kind},
            details={"kind": [job.kind]},
        )
    if not 1 <= int(replicas) <= MAX_REPLICAS:
        raise ValidationFailed(
            _(REPLICAS_RANGE) % {"max": MAX_REPLICAS}, details={"replicas": [str(replicas)]}
        )
    job.refresh_from_db()
    if job.state not in (JobState.SCHEDULED, JobState.RUNNING):
        raise InvalidTransition(_(NOT_RUNNING) % {"job": job.pk, "state": localize(job.state)})
    current = serving_replicas(job)
    if replicas == current:
        return current
    if replicas < current:
        return _scale_down(job, replicas, actor, reason)
    return replicas_add(job, current, replicas, actor, reason)


# Texts people read later, in their own language (apps.core.stored_text).
SCALED_DOWN = stored("scaled down to %(replicas)s")
SCALED_DOWN_TO = stored("scaled down to %(replicas)s: %(reason)s")
SCALED = stored("scaled %(old)s → %(new)s replicas")
SCALED_BECAUSE = stored("scaled %(old)s → %(new)s replicas: %(reason)s")
NO_ROOM = stored("cannot scale to %(replicas)s: no room for another replica")
SCALED_ON = stored("scaled %(old)s → %(new)s replicas on %(nodes)s")
SCALED_ON_BECAUSE = stored("scaled %(old)s → %(new)s replicas on %(nodes)s: %(reason)s")
SCALED_ON_ASKED = stored("scaled %(old)s → %(new)s replicas on %(nodes)s (asked %(asked)s)")
SCALED_ON_ASKED_BECAUSE = stored(
    "scaled %(old)s → %(new)s replicas on %(nodes)s (asked %(asked)s): %(reason)s"
)


@transaction.atomic
def _scale_down(job: Job, replicas: int, actor: Any, reason: str) -> int:
    Job.objects.select_for_update().filter(pk=job.pk).first()
    numbers = _replica_numbers(job)
    current = len(numbers)
    now = timezone.now()
    allocations_release(  # the SCALED event below says it
        job=job,
        actor=actor,
        rows=serving_allocations(job).filter(replica__in=numbers[replicas:]),
        reason=(SCALED_DOWN_TO if reason else SCALED_DOWN) % {"replicas": replicas, "reason": reason},
        msgid=None,
    )
    job.requested_cu = cu_for_replicas(job.requested_cu, current, replicas)
    Job.objects.filter(pk=job.pk).update(replicas=replicas, requested_cu=job.requested_cu, updated_at=now)
    job.replicas = replicas
    job_event(
        job,
        kind=JobEvent.Kind.SCALED,
        message=(SCALED_BECAUSE if reason else SCALED) % {"old": current, "new": replicas, "reason": reason},
        actor=actor,
        data={"from": current, "to": replicas},
    )
    service_push(job)
    return replicas


def replicas_add(
    job: Job, current: int, replicas: int, actor: Any, reason: str, avoid: dict[str, str] | None = None
) -> int:
    """Place ``replicas - current`` more replicas (never on the nodes of ``avoid``: node → why)."""
    snapshot = fleet_snapshot()
    engine = Engine(policy=BEST)
    catalog = list(DeviceModel.objects.all())
    coefficients = coefficients_on([m.pk for m in catalog])
    extra = replicas - current
    probe = Job.objects.select_related("project", "template__device_model", "device_model").get(pk=job.pk)
    probe.replicas = 1  # one replica's request, placed as many times as needed
    decisions = []
    for i in range(extra):  # one replica at a time: take what fits
        placed = None
        for request, _cu in job_requests(
            probe, precheck_failures=avoid, catalog=catalog, coefficients=coefficients
        ):
            # The snapshot already holds this job's replicas under its id: a distinct id per new one.
            request = replace(request, id=f"{job.pk}-scale-{current + i}")
            decision = engine.place(snapshot, request, commit=True)
            if decision.placed:
                placed = decision
                break
        if placed is None:
            break
        decisions.append(placed)
    if not decisions:
        job_event(
            job,
            kind=JobEvent.Kind.SCALED,
            message=NO_ROOM % {"replicas": replicas},
            actor=actor,
        )
        return current

    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job.pk).first()
        if Job.objects.filter(pk=job.pk).values_list("state", flat=True).first() not in (
            JobState.SCHEDULED,
            JobState.RUNNING,
        ):
            return current
        device_ids = sorted(
            {int(a.device_id) for d in decisions for part in d.placement.parts for a in part.devices}
        )
        caps = locked_device_caps(device_ids)
        usage = device_usage(device_ids)
        coef_now = coefficients_on({c[3] for c in caps.values() if c[3]})
        now = timezone.now()
        rows: list[Allocation] = []
        replica, number = serving_replicas(job), _next_replica(job)
        for decision in decisions:
            claimed = claim_placement(decision, usage, caps)
            if claimed is None:
                break  # another cycle took the room meanwhile: stop at what fits
            trial, claim = claimed
            batch = [
                allocation_row(
                    job,
                    pk,
                    a,
                    caps=caps,
                    replica=number,
                    coefficients=coef_now,
                    trace_id=decision.trace_id,
                    now=now,
                )
                for _replica, pk, a in claim
            ]
            usage = trial
            rows.extend(batch)
            replica += 1
            number += 1
        if not rows:
            return current
        Allocation.objects.bulk_create(rows)
        job.requested_cu = cu_for_replicas(job.requested_cu, current, replica)
        Job.objects.filter(pk=job.pk).update(replicas=replica, requested_cu=job.requested_cu, updated_at=now)
        job.replicas = replica
        nodes = sorted(Node.objects.filter(pk__in={r.node_id for r in rows}).values_list("name", flat=True))
        job_event(
            job,
            kind=JobEvent.Kind.SCALED,
            message=(
                (SCALED_ON_ASKED_BECAUSE if reason else SCALED_ON_ASKED)
                if replica < replicas
                else (SCALED_ON_BECAUSE if reason else SCALED_ON)
            )
            % {
                "old": current,
                "new": replica,
                "nodes": ", ".join(nodes),
                "asked": replicas,
                "reason": reason,
            },
            actor=actor,
            data={"from": current, "to": replica, "asked": replicas},
        )
        service_push(job)
        return replica
