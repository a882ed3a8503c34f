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
* Actions are ordered per *stream*: ``job:<id>`` for a job's objects (applies, then the deletes of a
  preempted or retried attempt), ``<cluster>:<Kind>:<namespace>/<name>`` for a standalone object
  (a node's labels and taints, a project's ResourceQuota) written by ``push_object_enqueue``.
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


def job_stream(job_id: int) -> str:
    return f"job:{job_id}"


def object_stream(cluster: Any, kind: str, namespace: str, name: str) -> str:
    return f"{cluster.pk}:{kind}:{namespace}/{name}"


def _action(job: Job, cluster: Any, obj: dict, seq: int, now: dt.datetime) -> PushAction:
    meta = obj.get("metadata") or {}
    return PushAction(
        job=job,
        stream=job_stream(job.pk),
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
        for row in PushAction.objects.filter(stream__in=[job_stream(job.pk) for job, _a, _c in items])
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
    streams = [job_stream(job.pk) for job, _a, _c in items]
    transaction.on_commit(lambda: [request_push(stream) for stream in streams])
    return actions


def push_actions_enqueue(*, job: Job, allocations: Sequence[Any], cluster: Any) -> list[PushAction]:
    """Write the namespace and workload applies for ``job`` on ``cluster`` (call inside the
    scheduling transaction); the push is requested after commit."""
    return push_actions_enqueue_many([(job, allocations, cluster)])


def _next_seq(stream: str, attempt: int) -> int:
    top = PushAction.objects.filter(stream=stream, attempt=attempt).aggregate(top=Max("seq"))["top"]
    return 0 if top is None else top + 1


def workload_delete_enqueue(*, job: Job, attempt: int | None = None) -> list[PushAction]:
    """Write graceful deletes for the objects of the job's attempt (call inside the transaction that
    preempts, retries or cancels it); pushed after commit. Nothing when nothing was ever pushed."""
    attempt = job.attempt if attempt is None else attempt
    stream = job_stream(job.pk)
    applied = list(
        PushAction.objects.filter(stream=stream, attempt=attempt, verb=PushAction.Verb.APPLY)
        .exclude(kind="Namespace")
        .select_related("cluster")
        .order_by("seq")
    )
    if not applied:
        return []
    # Applies not yet done will never be: the job moved on.
    PushAction.objects.filter(
        stream=stream, attempt=attempt, verb=PushAction.Verb.APPLY, state=PushAction.State.PENDING
    ).update(state=PushAction.State.SUPERSEDED, last_error="not applied: superseded by a delete")
    seq = _next_seq(stream, attempt)
    now = timezone.now()
    actions = [
        PushAction(
            job=job,
            stream=stream,
            cluster=a.cluster,
            attempt=attempt,
            seq=seq + i,
            verb=PushAction.Verb.DELETE,
            kind=a.kind,
            namespace=a.namespace,
            name=a.name,
            next_attempt_at=now,
        )
        for i, a in enumerate(applied)
    ]
    PushAction.objects.bulk_create(actions)
    transaction.on_commit(lambda: request_push(stream))
    return actions


def push_object_enqueue(
    *, cluster: Any, manifest: dict, actor: Any = None, verb: str = "apply"
) -> PushAction:
    """Write one standalone object to push (a Node patch of labels and taints, a ResourceQuota …)
    inside the caller's transaction; it is pushed after commit, in order with earlier writes of the
    same object. ``verb``: apply (create or update), patch (Node labels/taints) or delete."""
    if verb not in PushAction.Verb.values:
        raise ValueError(f"unknown verb {verb!r}")
    meta = manifest.get("metadata") or {}
    kind, namespace, name = manifest["kind"], meta.get("namespace", ""), meta["name"]
    stream = object_stream(cluster, kind, namespace, name)
    # An older pending write of the same object is superseded: only the newest state matters.
    PushAction.objects.filter(stream=stream, state=PushAction.State.PENDING).update(
        state=PushAction.State.SUPERSEDED, last_error="superseded by a newer write"
    )
    action = PushAction.objects.create(
        job=None,
        stream=stream,
        cluster=cluster,
        attempt=0,
        seq=_next_seq(stream, 0),
        verb=verb,
        object=manifest,
        kind=kind,
        namespace=namespace,
        name=name,
        next_attempt_at=timezone.now(),
    )
    transaction.on_commit(lambda: request_push(stream))
    return action


def request_push(stream: str | int) -> None:
    """Enqueue a push for one stream (a job id means its job stream). Never fails the caller: beat's
    ``push_pending_task`` catches up."""
    stream = job_stream(stream) if isinstance(stream, int) else stream
    try:
        from worker.tasks.push import push_stream_task

        push_stream_task.apply_async(args=[stream], queue="push")
    except Exception:  # noqa: BLE001 - the broker may be down; the periodic push will pick it up
        logger.warning(
            "could not enqueue a push for %s; the periodic push will pick it up", stream, exc_info=True
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
            stream=action.stream, attempt=action.attempt, seq__gt=action.seq, state=PushAction.State.PENDING
        ).update(state=PushAction.State.FAILED, last_error=f"not attempted: {_describe(action)} failed")
        if action.job_id is None or action.verb != PushAction.Verb.APPLY:
            return True
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


def _namespace_missing(action: PushAction, error: BackendError) -> bool:
    """A namespaced apply refused because its namespace does not exist (yet)."""
    message = error.message.lower()
    return (
        action.verb == PushAction.Verb.APPLY
        and bool(action.namespace)
        and error.status == 404
        and "namespaces" in message
        and "not found" in message
    )


def _call(backend, action: PushAction) -> dict:
    if action.verb == PushAction.Verb.APPLY:
        result = backend.apply(action.object)
        return {"action": result.action, "uid": result.uid, "resourceVersion": result.resource_version}
    if action.verb == PushAction.Verb.PATCH:
        obj = action.object
        live = backend.patch_node(
            action.name,
            labels=(obj.get("metadata") or {}).get("labels") or None,
            taints=(obj.get("spec") or {}).get("taints"),
        )
        meta = live.get("metadata") or {}
        return {
            "action": "patched",
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
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
    summary = push_stream_run(stream=job_stream(job_id), actor=actor, max_attempts=max_attempts, now=now)
    summary["job_id"] = job_id
    return summary


def push_stream_run(
    *,
    stream: str,
    actor: Any = "worker",
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    now: dt.datetime | None = None,
    session: PushSession | None = None,
) -> dict:
    """Apply a stream's due pending actions in order. Returns counts: applied / retry / failed / waiting.

    A caller pushing many streams passes one ``session`` (see ``push_pending_run``) and closes it.
    """
    now = now or timezone.now()
    summary = {"stream": stream, "applied": 0, "retry": 0, "failed": 0, "waiting": 0, "errors": []}
    own = session is None
    session = PushSession() if own else session
    try:
        # One read for the stream's pending actions and one for its job's state; each outcome is
        # still recorded by a conditional update, so a concurrent pusher never double-applies.
        pending = list(
            PushAction.objects.select_related("cluster")
            .filter(stream=stream, state=PushAction.State.PENDING)
            .order_by("attempt", "seq")
        )
        job_id = next((a.job_id for a in pending if a.job_id), None)
        job_state = Job.objects.filter(pk=job_id).values_list("state", "attempt").first() if job_id else None
        for action in pending:
            if action.next_attempt_at > now:
                summary["waiting"] += 1
                break
            if (
                action.job_id
                and action.verb == PushAction.Verb.APPLY
                and (
                    job_state is None
                    or job_state[0] not in (JobState.SCHEDULED, JobState.RUNNING)
                    or job_state[1] != action.attempt
                )
            ):
                # The job moved on (cancelled, requeued, a newer attempt): this apply is stale.
                PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
                    state=PushAction.State.FAILED,
                    last_error=f"not applied: job is {job_state[0] if job_state else 'gone'}",
                )
                summary["failed"] += 1
                continue
            attempts = action.attempts + 1
            namespace = (action.cluster_id, action.name)
            is_namespace = action.kind == "Namespace" and action.verb == PushAction.Verb.APPLY
            try:
                if is_namespace and namespace in session.namespaces:
                    # Every job of a project applies its namespace; once per batch is enough.
                    result = {"action": "unchanged", "note": "applied earlier in this batch"}
                else:
                    result = _call(session.backend(action.cluster), action)  # no transaction open here
                    if is_namespace:
                        session.namespaces.add(namespace)
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
                if _namespace_missing(action, e) and attempts < max_attempts:
                    # Its namespace is being created by another stream (e.g. a ResourceQuota pushed
                    # beside a project's first job): wait for it instead of failing.
                    PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
                        attempts=attempts,
                        last_error=e.message[:2000],
                        next_attempt_at=now + dt.timedelta(seconds=backoff_delay(attempts)),
                    )
                    summary["retry"] += 1
                    break
                _fail(action, error=e.message, attempts=attempts, actor=actor, now=now)
                summary["failed"] += 1
                break
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
        if own:
            session.close()
    return summary


class PushSession:
    """What a batch of pushes shares: one backend (client and connection pool) per cluster, and the
    namespaces already applied in this batch."""

    def __init__(self) -> None:
        self.backends: dict[int, Any] = {}
        self.namespaces: set[tuple[int, str]] = set()

    def backend(self, cluster: Any) -> Any:
        if cluster.pk not in self.backends:
            self.backends[cluster.pk] = backend_for(cluster)
        return self.backends[cluster.pk]

    def close(self) -> None:
        for backend in self.backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()


def push_pending_run(*, actor: Any = "worker", limit: int = 100, now: dt.datetime | None = None) -> dict:
    """Push every stream with a due action, one client per cluster for the whole batch. One stream's
    unexpected failure does not stop the others."""
    done, errors = [], []
    session = PushSession()
    try:
        for stream in push_due_streams(now=now, limit=limit):
            try:
                push_stream_run(stream=stream, actor=actor, now=now, session=session)
                done.append(stream)
            except Exception as e:  # noqa: BLE001
                logger.exception("push of %s failed", stream)
                errors.append(f"{stream}: {e}")
    finally:
        session.close()
    return {"pushed": done, "errors": errors}


def push_due_streams(*, now: dt.datetime | None = None, limit: int = 100) -> list[str]:
    """Streams with a pending action that is due, oldest first."""
    now = now or timezone.now()
    rows = (
        PushAction.objects.filter(state=PushAction.State.PENDING, next_attempt_at__lte=now)
        .values("stream")
        .annotate(due=Max("next_attempt_at"))
        .order_by("due", "stream")[:limit]
    )
    return [row["stream"] for row in rows]
