"""Push through an outbox: scheduling writes ``PushAction`` rows; a worker applies them after commit.

* ``push_actions_enqueue`` runs inside the scheduling transaction: it writes the namespace apply and
  the workload apply for the job's cluster, and asks for a push once the transaction commits (a
  broker outage never fails the caller: the periodic ``push_pending_task`` catches up).
* ``push_job_run`` applies a job's pending actions in ``seq`` order. No database transaction is open
  around a network call: read the action, call the backend, then record the outcome with a short
  conditional update (``state=pending``). Delivery is at least once; apply is idempotent (409 →
  read and compare), so a re-delivered task either finds nothing pending or re-applies harmlessly.
* Transient errors back off exponentially with jitter (bounded); after ``max_attempts``, or on a
  permanent error, the action fails and the job returns to pending with the reason, its
  allocations released and its ``attempt`` advanced (the allocation slot and the workload name
  include the attempt, so the next placement cannot collide with this one).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from apps.jobs.models import Job, JobState
from apps.scheduling.models import PushAction
from worker.kube.backend import BackendError, PermanentBackendError, TransientBackendError, backend_for
from worker.kube.manifests import namespace_manifest, workload_manifest

logger = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 2.0
BACKOFF_CAP_SECONDS = 300.0
DEFAULT_MAX_ATTEMPTS = 5


def backoff_delay(
    attempts: int, *, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS
) -> float:
    """Exponential backoff with "equal jitter": half the capped delay, plus up to the other half."""
    delay = min(cap, base * (2 ** max(0, attempts - 1)))
    return delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 - jitter, not cryptography


def _action(job: Job, cluster: Any, obj: dict, seq: int, now: dt.datetime) -> PushAction:
    meta = obj.get("metadata") or {}
    return PushAction(
        job=job,
        cluster=cluster,
        attempt=job.attempt,
        seq=seq,
        verb=PushAction.Verb.APPLY,
        object=obj,
        kind=obj["kind"],
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        next_attempt_at=now,
    )


def push_actions_enqueue_many(items: Iterable[tuple[Job, Sequence[Any], Any]]) -> list[PushAction]:
    """``push_actions_enqueue`` for a batch of ``(job, allocations, cluster)``: one query for the next
    sequence numbers, one insert, one after-commit enqueue per job. Allocations must have ``device``
    and ``node`` loaded, jobs their ``project``."""
    items = list(items)
    if not items:
        return []
    now = timezone.now()
    next_seq = {
        (row["job_id"], row["attempt"]): row["top"] + 1
        for row in PushAction.objects.filter(job_id__in=[job.pk for job, _a, _c in items])
        .values("job_id", "attempt")
        .annotate(top=Max("seq"))
    }
    actions: list[PushAction] = []
    for job, allocations, cluster in items:
        seq = next_seq.get((job.pk, job.attempt), 0)
        objects = (
            namespace_manifest(job.project),
            workload_manifest(job, allocations, cluster, attempt=job.attempt),
        )
        for offset, obj in enumerate(objects):
            actions.append(_action(job, cluster, obj, seq + offset, now))
    PushAction.objects.bulk_create(actions)
    job_ids = [job.pk for job, _a, _c in items]
    transaction.on_commit(lambda: [request_push(job_id) for job_id in job_ids])
    return actions


def push_actions_enqueue(*, job: Job, allocations: Sequence[Any], cluster: Any) -> list[PushAction]:
    """Write the namespace and workload applies for ``job`` on ``cluster`` (call inside the
    scheduling transaction); the push is requested after commit."""
    return push_actions_enqueue_many([(job, allocations, cluster)])


def request_push(job_id: int) -> None:
    """Enqueue a push for one job. Never fails the caller: beat's ``push_pending_task`` catches up."""
    try:
        from worker.tasks.push import push_job_task

        push_job_task.apply_async(args=[job_id], queue="push")
    except Exception:  # noqa: BLE001 - the broker may be down; the periodic push will pick it up
        logger.warning(
            "could not enqueue a push for job %s; the periodic push will pick it up", job_id, exc_info=True
        )


def _describe(action: PushAction) -> str:
    where = f"{action.namespace}/{action.name}" if action.namespace else action.name
    return f"{action.verb} {action.kind} {where}"


def _fail(action: PushAction, *, error: str, attempts: int, actor: Any, now: dt.datetime) -> bool:
    """Mark the action (and the job's later pending actions of that attempt) failed; return the job
    to pending with the reason and release its allocations. Returns whether this call failed it."""
    from apps.jobs.services import job_transition
    from apps.scheduling.services import allocations_release

    reason = f"push failed: {_describe(action)}: {error}"[:500]
    with transaction.atomic():
        won = PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
            state=PushAction.State.FAILED, attempts=attempts, last_error=error[:2000], next_attempt_at=now
        )
        if not won:
            return False
        PushAction.objects.filter(
            job_id=action.job_id, attempt=action.attempt, seq__gt=action.seq, state=PushAction.State.PENDING
        ).update(state=PushAction.State.FAILED, last_error=f"not attempted: {_describe(action)} failed")
        job = Job.objects.get(pk=action.job_id)
        if job.attempt == action.attempt and job_transition(
            job,
            to=JobState.PENDING,
            actor=actor,
            reason=reason,
            expected=(JobState.SCHEDULED,),
            # A new attempt: its allocations and objects must not collide with this one's.
            attempt=F("attempt") + 1,
        ):
            allocations_release(job=job, reason=reason, actor=actor)
    return True


def _call(backend, action: PushAction) -> dict:
    if action.verb == PushAction.Verb.APPLY:
        result = backend.apply(action.object)
        return {"action": result.action, "uid": result.uid, "resourceVersion": result.resource_version}
    deleted = backend.delete(action.kind, action.namespace or None, action.name)
    return {"action": "deleted" if deleted else "absent", "uid": "", "resourceVersion": ""}


def push_job_run(
    *,
    job_id: int,
    actor: Any = "worker",
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    now: dt.datetime | None = None,
) -> dict:
    """Apply the job's due pending actions in order. Returns counts: applied / retry / failed / waiting."""
    now = now or timezone.now()
    summary = {"job_id": job_id, "applied": 0, "retry": 0, "failed": 0, "waiting": 0, "errors": []}
    backends: dict[int, Any] = {}
    try:
        while True:
            action = (
                PushAction.objects.select_related("cluster")
                .filter(job_id=job_id, state=PushAction.State.PENDING)
                .order_by("attempt", "seq")
                .first()
            )
            if action is None:
                break
            if action.next_attempt_at > now:
                summary["waiting"] += 1
                break
            job_state = Job.objects.filter(pk=job_id).values_list("state", "attempt").first()
            if action.verb == PushAction.Verb.APPLY and (
                job_state is None
                or job_state[0] not in (JobState.SCHEDULED, JobState.RUNNING)
                or job_state[1] != action.attempt
            ):
                # The job moved on (cancelled, requeued, a newer attempt): this apply is stale.
                PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
                    state=PushAction.State.FAILED,
                    last_error=f"not applied: job is {job_state[0] if job_state else 'gone'}",
                )
                summary["failed"] += 1
                continue
            attempts = action.attempts + 1
            try:
                backend = backends.get(action.cluster_id)
                if backend is None:
                    backend = backends[action.cluster_id] = backend_for(action.cluster)
                result = _call(backend, action)  # the network call: no transaction open here
            except TransientBackendError as e:
                summary["errors"].append(f"{_describe(action)}: {e.message}")
                if attempts >= max_attempts:
                    _fail(
                        action,
                        error=f"{e.message} (after {attempts} attempts)",
                        attempts=attempts,
                        actor=actor,
                        now=now,
                    )
                    summary["failed"] += 1
                    break
                PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
                    attempts=attempts,
                    last_error=e.message[:2000],
                    next_attempt_at=now + dt.timedelta(seconds=backoff_delay(attempts)),
                )
                summary["retry"] += 1
                break  # later actions of this job wait for this one
            except (PermanentBackendError, BackendError) as e:
                summary["errors"].append(f"{_describe(action)}: {e.message}")
                _fail(action, error=e.message, attempts=attempts, actor=actor, now=now)
                summary["failed"] += 1
                break
            with transaction.atomic():
                done = PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
                    state=PushAction.State.APPLIED,
                    attempts=attempts,
                    last_error="",
                    applied_at=timezone.now(),
                    result=result,
                )
            if done:
                summary["applied"] += 1
    finally:
        for backend in backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()
    return summary


def push_due_job_ids(*, now: dt.datetime | None = None, limit: int = 100) -> list[int]:
    """Jobs with a pending action that is due, oldest first."""
    now = now or timezone.now()
    rows = (
        PushAction.objects.filter(state=PushAction.State.PENDING, next_attempt_at__lte=now)
        .values("job_id")
        .annotate(due=Max("next_attempt_at"))
        .order_by("due", "job_id")[:limit]
    )
    return [row["job_id"] for row in rows]
