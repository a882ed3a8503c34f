"""The pusher: applies the outbox's streams to their clusters, after commit.

* ``push_stream_run`` applies a stream's pending actions in ``seq`` order. No database transaction
  is open around a network call: read the action, call the backend, then record the outcome with a
  short conditional update (``state=pending``). Delivery is at least once; apply is idempotent (409
  → read and compare), so a re-delivered task either finds nothing pending or re-applies harmlessly.
* Transient errors back off exponentially with jitter (bounded); after ``max_attempts``, or on a
  permanent error, the action fails with the later actions of its attempt. A failed *workload*
  apply is handed to the caller's ``on_failed`` (``OnFailed``) inside the transaction that marks it
  failed: scheduling's rule (``apps.scheduling.push``, what the worker runs) returns the job to
  pending with the reason, releases its allocations and advances its ``attempt`` (the allocation
  slot and the workload name include the attempt, so the next placement cannot collide with this
  one). Without ``on_failed`` only the actions are marked.
* An apply refused with 422 ``field is immutable`` (a Job's ``spec.template``, a Deployment's
  ``spec.selector``: ``ImmutableFieldError``) is neither retried as a patch (it would loop) nor
  failed (that releases the cards while the live object runs): the live object is deleted
  (Background) and the action waits, checked every ``REPLACE_POLL_SECONDS``, until the object and
  the pods of its selector are gone, then creates the desired object (result ``replaced``: old uid).
* ``PushSession``: what a batch of pushes shares (one backend per cluster, namespaces applied).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.clusters.backends.errors import (
    BackendError,
    ImmutableFieldError,
    PermanentBackendError,
    TransientBackendError,
)
from apps.clusters.connections import backend_for
from apps.clusters.health import (
    cluster_unreachable,
    clusters_backing_off,
    clusters_in_backoff,
    loop_record,
    no_answer,
)
from apps.clusters.models import ClusterLoop, PushAction
from apps.clusters.outbox import job_stream
from apps.core.locks import try_lock
from apps.core.stored_text import stored
from apps.inventory.models import Cluster
from apps.jobs.models import Job, JobState

logger = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 2.0
BACKOFF_CAP_SECONDS = 300.0
DEFAULT_MAX_ATTEMPTS = 5
# How often a replaced object (see ImmutableFieldError) is checked for being gone.
REPLACE_POLL_SECONDS = 5.0
# What a caller does when a job's workload apply failed for good, called with ``action`` (the failed
# PushAction, ``job_id`` and ``attempt`` set), ``reason`` (one line, ≤ 500 characters, for the job's
# event) and ``actor``, inside the transaction that marks the action failed: its writes commit with
# it, and if it raises the failure rolls back (the action stays pending and is retried).
OnFailed = Callable[..., None]


def backoff_delay(
    attempts: int, *, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS
) -> float:
    """Exponential backoff with "equal jitter": half the capped delay, plus up to the other half."""
    delay = min(cap, base * (2 ** max(0, attempts - 1)))
    return delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 - jitter, not cryptography


# Texts stored in job reasons and events, shown in the reader's language (apps.core.stored_text).
PUSH_FAILED = stored("push failed: %(action)s: %(error)s")
NOT_ATTEMPTED = stored("not attempted: %(action)s failed")
# An action held while its cluster does not answer: not sent, not failed; sent once it answers again.
HELD_UNREACHABLE = stored("held: cluster %(cluster)s is unreachable (%(error)s); sent once it answers again")
HELD_PREFIX = "held: "


def _describe(action: PushAction) -> str:
    where = f"{action.namespace}/{action.name}" if action.namespace else action.name
    return f"{action.verb} {action.kind} {where}"


def _retry_later(action: PushAction, *, attempts: int, error: str, now: dt.datetime) -> None:
    """Keep a still-pending action for another round, after an exponential backoff."""
    PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
        attempts=attempts,
        last_error=error[:2000],
        next_attempt_at=now + dt.timedelta(seconds=backoff_delay(attempts)),
    )


def _hold(action: PushAction, *, error: str) -> None:
    """Mark a pending action held because its cluster does not answer (not an attempt: its count and
    its next try stay as they are)."""
    reason = HELD_UNREACHABLE % {"cluster": action.cluster.slug, "error": error[:500]}
    PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(last_error=reason[:2000])


def _fail(
    action: PushAction, *, error: str, attempts: int, actor: Any, now: dt.datetime, on_failed: OnFailed | None
) -> bool:
    """Mark the action (and the later pending actions of its attempt) failed. A failed workload apply
    is handed to ``on_failed`` inside the same transaction, so what it does (the job back to
    pending, its allocations released) commits or rolls back with it. Returns whether this call
    failed it."""
    reason = (PUSH_FAILED % {"action": _describe(action), "error": error})[:500]
    with transaction.atomic():
        won = PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
            state=PushAction.State.FAILED, attempts=attempts, last_error=error[:2000], next_attempt_at=now
        )
        if not won:
            return False
        PushAction.objects.filter(
            stream=action.stream, attempt=action.attempt, seq__gt=action.seq, state=PushAction.State.PENDING
        ).update(state=PushAction.State.FAILED, last_error=NOT_ATTEMPTED % {"action": _describe(action)})
        if action.job_id is None or action.verb != PushAction.Verb.APPLY or on_failed is None:
            return True
        on_failed(action=action, reason=reason, actor=actor)
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


def _replacing(error: ImmutableFieldError) -> dict:
    """What to wait for before the object is created again: the refused object's uid and the
    selector of its pods (a Job's generated ``batch.kubernetes.io/controller-uid`` selector)."""
    live = error.live
    selector = ((live.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "uid": (live.get("metadata") or {}).get("uid", ""),
        "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        "fields": error.fields,
    }


def _replacement_wait(backend, action: PushAction) -> str:
    """Why a replaced object cannot be created yet ("" once it can): the old object is still there
    (a finalizer holds it), or pods it owned are still terminating. A Background delete removes the
    object at once but its pods end gracefully (terminationGracePeriodSeconds, then SIGKILL —
    Kubernetes docs "Pod Lifecycle", termination of pods); their cards stay in use until then."""
    replacing = (action.result or {}).get("replacing") or {}
    live = backend.get(action.kind, action.namespace or None, action.name)
    if live is not None and (live.get("metadata") or {}).get("uid") == replacing.get("uid"):
        return f"{_describe(action)}: the replaced object is still being deleted"
    if replacing.get("selector") and action.namespace:
        pods = backend.list_owned("Pod", action.namespace, selector=replacing["selector"])
        if pods:
            return f"{_describe(action)}: {len(pods)} pod(s) of the replaced object still terminating"
    return ""


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
    on_failed: OnFailed | None = None,
) -> dict:
    """Apply the job's due pending actions in order. Returns counts: applied / retry / failed / waiting."""
    summary = push_stream_run(
        stream=job_stream(job_id), actor=actor, max_attempts=max_attempts, now=now, on_failed=on_failed
    )
    summary["job_id"] = job_id
    return summary


def push_stream_run(
    *,
    stream: str,
    actor: Any = "worker",
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    now: dt.datetime | None = None,
    session: PushSession | None = None,
    cluster_id: int | None = None,
    on_failed: OnFailed | None = None,
) -> dict:
    """Apply a stream's due pending actions in order. Returns counts: applied / retry / failed / waiting.

    A caller pushing many streams passes one ``session`` (see ``push_pending_run``) and closes it.
    With ``cluster_id`` only that cluster's actions of the stream are pushed (a per-cluster push: a
    job retried on another cluster keeps its old attempt's deletes on the first one). Actions of a
    cluster that gave no answer earlier in the session (``PushSession.unreachable``) wait, untried.
    A job's workload that fails for good is handed to ``on_failed`` (``OnFailed``).
    """
    now = now or timezone.now()
    own = session is None
    # A push of its own (after commit) does not call a cluster that is backing off: held instead.
    session = PushSession(skip=clusters_backing_off(now=now)) if own else session
    run = _StreamRun(stream, session, now, actor, max_attempts, on_failed)
    try:
        pending, job_state = _pending_actions(stream, cluster_id)
        for action in pending:
            if not _push_action(run, action, job_state):
                break  # later actions of the stream wait for this one
    finally:
        if own:
            session.close()
    return run.summary


@dataclass
class _StreamRun:
    """One ``push_stream_run``: what each action's push needs, and the counts so far."""

    stream: str
    session: PushSession
    now: dt.datetime
    actor: Any
    max_attempts: int
    on_failed: OnFailed | None
    summary: dict = field(init=False)

    def __post_init__(self) -> None:
        self.summary = {
            "stream": self.stream,
            "applied": 0,
            "retry": 0,
            "failed": 0,
            "waiting": 0,
            "held": 0,
            "errors": [],
        }

    def count(self, outcome: str) -> None:
        self.summary[outcome] += 1

    def error(self, action: PushAction, message: str) -> None:
        self.summary["errors"].append(f"{_describe(action)}: {message}")

    def fail(self, action: PushAction, *, error: str, attempts: int) -> None:
        _fail(
            action, error=error, attempts=attempts, actor=self.actor, now=self.now, on_failed=self.on_failed
        )
        self.count("failed")

    def retry_later(self, action: PushAction, *, attempts: int, error: str, outcome: str = "retry") -> None:
        _retry_later(action, attempts=attempts, error=error, now=self.now)
        self.count(outcome)


def _pending_actions(stream: str, cluster_id: int | None) -> tuple[list[PushAction], tuple | None]:
    """The stream's pending actions in order and its job's (state, attempt). One read for each; each
    outcome is still recorded by a conditional update, so a concurrent pusher never double-applies."""
    rows = PushAction.objects.select_related("cluster").filter(stream=stream, state=PushAction.State.PENDING)
    if cluster_id is not None:
        rows = rows.filter(cluster_id=cluster_id)
    pending = list(rows.order_by("attempt", "seq"))
    job_id = next((a.job_id for a in pending if a.job_id), None)
    job_state = Job.objects.filter(pk=job_id).values_list("state", "attempt").first() if job_id else None
    return pending, job_state


def _stale(action: PushAction, job_state: tuple | None) -> bool:
    """A job's apply whose job moved on (cancelled, requeued, a newer attempt)."""
    return bool(
        action.job_id
        and action.verb == PushAction.Verb.APPLY
        and (
            job_state is None
            or job_state[0] not in (JobState.SCHEDULED, JobState.RUNNING)
            or job_state[1] != action.attempt
        )
    )


def _push_action(run: _StreamRun, action: PushAction, job_state: tuple | None) -> bool:
    """Push one pending action and record its outcome; whether the stream's next action may go now."""
    if action.next_attempt_at > run.now:
        run.count("waiting")
        return False
    if _stale(action, job_state):
        PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
            state=PushAction.State.FAILED,
            last_error=f"not applied: job is {job_state[0] if job_state else 'gone'}",
        )
        run.count("failed")
        return True
    if action.cluster_id in run.session.unreachable:
        # The cluster did not answer a moment ago (or backs off after failures): another call
        # would wait the timeout again. Held with the reason, untried.
        _hold(action, error=run.session.unreachable[action.cluster_id])
        run.count("held")
        return False
    attempts = action.attempts + 1
    try:
        result = _send(run, action)
    except TransientBackendError as e:
        _transient(run, action, e, attempts=attempts)
        return False
    except ImmutableFieldError as e:
        _replace(run, action, e, attempts=attempts)
        return False
    except (PermanentBackendError, BackendError) as e:
        _refused(run, action, e, attempts=attempts)
        return False
    if result is None:
        run.count("waiting")
        return False
    if (action.result or {}).get("replacing"):
        result["replaced"] = action.result["replacing"]["uid"]
    done = PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
        state=PushAction.State.APPLIED,
        attempts=attempts,
        last_error="",
        applied_at=timezone.now(),
        result=result,
    )
    if done:
        run.count("applied")
    return True


def _send(run: _StreamRun, action: PushAction) -> dict | None:
    """Call the cluster for ``action`` (no transaction open here): its result, or None while a
    replaced object's pods are still ending (not an error and not a try)."""
    session = run.session
    if action.verb == PushAction.Verb.APPLY and (action.result or {}).get("replacing"):
        wait = _replacement_wait(session.backend(action.cluster), action)
        if wait:
            PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
                last_error=wait[:2000],
                next_attempt_at=run.now + dt.timedelta(seconds=REPLACE_POLL_SECONDS),
            )
            return None
    namespace = (action.cluster_id, action.name)
    is_namespace = action.kind == "Namespace" and action.verb == PushAction.Verb.APPLY
    if is_namespace and namespace in session.namespaces:
        # Every job of a project applies its namespace; once per batch is enough.
        return {"action": "unchanged", "note": "applied earlier in this batch"}
    result = _call(session.backend(action.cluster), action)
    if is_namespace:
        session.namespaces.add(namespace)
    return result


def _transient(run: _StreamRun, action: PushAction, e: TransientBackendError, *, attempts: int) -> None:
    """A retryable error: back off, or after ``max_attempts`` fail (a standalone object is held)."""
    run.error(action, e.message)
    run.session.note_error(action.cluster_id, e)
    if attempts >= run.max_attempts and action.job_id is None and no_answer(e):
        # A standalone object (a quota, a node's labels) is never lost to an outage: it
        # waits for the cluster, tried at the capped backoff, held with the reason.
        reason = HELD_UNREACHABLE % {"cluster": action.cluster.slug, "error": e.message[:500]}
        run.retry_later(action, attempts=attempts, error=reason, outcome="held")
    elif attempts >= run.max_attempts:
        run.fail(action, error=f"{e.message} (after {attempts} attempts)", attempts=attempts)
    else:
        run.retry_later(action, attempts=attempts, error=e.message)


def _replace(run: _StreamRun, action: PushAction, e: ImmutableFieldError, *, attempts: int) -> None:
    """422 "field is immutable" (pkg/apis/batch/validation ValidateJobSpecUpdate, apps
    ValidateDeploymentUpdate): patching again would loop on 422, and failing the push would release
    the cards while the live object still runs. Delete it (Background), create the desired one once
    it and its pods are confirmed gone (a later round)."""
    run.error(action, e.message)
    replacing = _replacing(e)
    try:
        run.session.backend(action.cluster).delete(action.kind, action.namespace or None, action.name)
    except BackendError as delete_error:
        run.summary["errors"].append(f"delete for replacement: {delete_error.message}")
        run.session.note_error(action.cluster_id, delete_error)
        run.retry_later(action, attempts=attempts, error=delete_error.message)
        return
    PushAction.objects.filter(pk=action.pk, state=PushAction.State.PENDING).update(
        last_error=(f"{e.message}; the live object was deleted and is created again once it is gone")[:2000],
        result={"replacing": replacing},
        next_attempt_at=run.now + dt.timedelta(seconds=REPLACE_POLL_SECONDS),
    )
    run.count("retry")


def _refused(run: _StreamRun, action: PushAction, e: BackendError, *, attempts: int) -> None:
    """A permanent refusal fails the action, except a namespace that is being created."""
    run.error(action, e.message)
    if _namespace_missing(action, e) and attempts < run.max_attempts:
        # Its namespace is being created by another stream (e.g. a ResourceQuota pushed
        # beside a project's first job): wait for it instead of failing.
        run.retry_later(action, attempts=attempts, error=e.message)
        return
    run.fail(action, error=e.message, attempts=attempts)


class PushSession:
    """What a batch of pushes shares: one backend (client and connection pool) per cluster, the
    namespaces already applied in this batch, and the clusters that gave no answer (timed out,
    refused, reset): their remaining actions wait for a later round instead of each waiting the
    client timeout again (``unreachable``; ``skip`` pre-fills it, e.g. with clusters backing off).
    ``down`` keeps, per cluster, the first error that says its API server is down (no answer, 5xx,
    429), for the cluster's health record."""

    def __init__(self, *, timeout: float | None = None, skip: Any = ()) -> None:
        self.backends: dict[int, Any] = {}
        self.namespaces: set[tuple[int, str]] = set()
        self.timeout = timeout
        self.unreachable: dict[int, str] = (
            dict(skip) if isinstance(skip, dict) else {pk: "backing off after failures" for pk in skip}
        )
        self.down: dict[int, str] = {}

    def backend(self, cluster: Any) -> Any:
        if cluster.pk not in self.backends:
            kwargs = {"timeout": self.timeout} if self.timeout else {}
            self.backends[cluster.pk] = backend_for(cluster, **kwargs)
        return self.backends[cluster.pk]

    def note_error(self, cluster_id: int, error: BackendError) -> None:
        if cluster_unreachable(error):
            self.down.setdefault(cluster_id, error.message)
        if no_answer(error):
            self.unreachable.setdefault(cluster_id, error.message)

    def close(self) -> None:
        for backend in self.backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()


def push_pending_run(
    *,
    actor: Any = "worker",
    limit: int = 100,
    now: dt.datetime | None = None,
    on_failed: OnFailed | None = None,
) -> dict:
    """Push every stream with a due action, one client per cluster for the whole batch. One stream's
    unexpected failure does not stop the others."""
    done, errors = [], []
    session = PushSession(skip=clusters_backing_off(now=now))
    try:
        for stream in push_due_streams(now=now, limit=limit):
            try:
                push_stream_run(stream=stream, actor=actor, now=now, session=session, on_failed=on_failed)
                done.append(stream)
            except Exception as e:  # noqa: BLE001
                logger.exception("push of %s failed", stream)
                errors.append(f"{stream}: {e}")
    finally:
        session.close()
    return {"pushed": done, "errors": errors}


def push_due_streams(
    *, now: dt.datetime | None = None, limit: int = 100, cluster_id: int | None = None
) -> list[str]:
    """Streams with a pending action that is due (on ``cluster_id`` when given), oldest first."""
    now = now or timezone.now()
    due = PushAction.objects.filter(state=PushAction.State.PENDING, next_attempt_at__lte=now)
    if cluster_id is not None:
        due = due.filter(cluster_id=cluster_id)
    rows = due.values("stream").annotate(due=Max("next_attempt_at")).order_by("due", "stream")[:limit]
    return [row["stream"] for row in rows]


# One push of a cluster at a time (apps.core.locks): a push waiting on a slow API server makes the next
# period's task for that cluster skip; the other clusters' tasks take their own locks.
PUSH_LOCK = "suanchi:push:cluster:%d"


def push_due_clusters(*, now: dt.datetime | None = None) -> tuple[list[int], list[int]]:
    """(clusters with a due pending action to push this period, such clusters skipped because their
    last push found the cluster down and their backoff has not run out)."""
    now = now or timezone.now()
    ids = sorted(
        set(
            PushAction.objects.filter(state=PushAction.State.PENDING, next_attempt_at__lte=now).values_list(
                "cluster_id", flat=True
            )
        )
    )
    waiting = clusters_in_backoff(loop=ClusterLoop.Loop.PUSH, now=now)
    return [pk for pk in ids if pk not in waiting], [pk for pk in ids if pk in waiting]


def push_cluster_run(
    *,
    cluster_id: int,
    actor: Any = "worker",
    limit: int = 100,
    now: dt.datetime | None = None,
    timeout: float | None = None,
    force: bool = False,
    on_failed: OnFailed | None = None,
) -> dict:
    """One cluster's periodic push (the per-cluster task): its streams with a due action, one client
    for all of them, under the cluster's lock. Skipped when the cluster is gone, backing off (unless
    ``force``) or being pushed by another worker. The first call the cluster does not answer stops
    the round (the rest wait, untried); an answer saying its API server is down (5xx, 429) or no
    answer marks the cluster failed (``apps.clusters.health``), which backs its pushes off."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return {"cluster_id": cluster_id, "skipped": "gone"}
    if not force and cluster.pk in clusters_in_backoff(loop=ClusterLoop.Loop.PUSH, now=now):
        return {"cluster": cluster.slug, "skipped": "backing off after failures"}
    done, errors, applied = [], [], 0
    with try_lock(PUSH_LOCK % cluster.pk, holder="push") as taken:
        if not taken:
            return {"cluster": cluster.slug, "skipped": "another push of this cluster is running"}
        started = timezone.now()
        session = PushSession(timeout=timeout)
        try:
            for stream in push_due_streams(now=now, limit=limit, cluster_id=cluster.pk):
                if cluster.pk in session.unreachable:
                    break
                try:
                    summary = push_stream_run(
                        stream=stream,
                        actor=actor,
                        now=now,
                        session=session,
                        cluster_id=cluster.pk,
                        on_failed=on_failed,
                    )
                    done.append(stream)
                    applied += summary["applied"]
                except Exception as e:  # noqa: BLE001
                    logger.exception("push of %s failed", stream)
                    errors.append(f"{stream}: {e}")
        finally:
            session.close()
        error = session.down.get(cluster.pk)
        loop_record(cluster=cluster, loop=ClusterLoop.Loop.PUSH, error=error, started_at=started, actor=actor)
        if applied and not error:  # it answers again: what was held for it is due at once
            PushAction.objects.filter(
                cluster=cluster, state=PushAction.State.PENDING, last_error__startswith=HELD_PREFIX
            ).update(next_attempt_at=now or timezone.now())
    return {"cluster": cluster.slug, "pushed": done, "errors": errors, "unreachable": error or ""}
