"""The push outbox: the one door every app uses to send an object, a deletion or a node patch to a
cluster. Each function writes ``PushAction`` rows inside the caller's transaction and asks for a
push once it commits (``enqueue_on_commit``: a broker outage never fails the caller, the periodic
``push_pending_task`` catches up).

* ``push_actions_enqueue`` (scheduling): the namespace apply and the applies of a placed job's
  whole group (``manifests.workload_objects``: DRA claims, a gang's Service and per-replica Jobs).
* ``workload_delete_enqueue``: graceful deletes of every object of a job attempt (preempted,
  retried, cancelled), workloads first, in the reverse order of their applies.
* ``push_object_enqueue``: one standalone object (a node's labels and taints, a project's
  ResourceQuota); an older pending write of the same object is superseded.
* ``node_patch_enqueue``: a Node's ledger labels and taints (a node status change's taint:
  ``apps.scheduling.faults.node_moved``; labels the ledger brought in line; rollout's gray marks),
  dropped labels sent as null.

Actions are ordered per *stream*: ``job:<id>`` for a job's objects (applies, then the deletes of a
preempted or retried attempt), ``<cluster>:<Kind>:<namespace>/<name>`` for a standalone object.
The pusher (``apps.clusters.pusher``) applies them. Allocations handed in are ``apps.jobs`` rows
with ``device`` and ``node`` loaded; the manifests are rendered from them in memory (no query).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Max
from django.utils import timezone

from apps.clusters.manifests import HOSTNAME_LABEL, namespace_manifest, node_patch, workload_objects
from apps.clusters.models import PushAction
from apps.core import task_names
from apps.core.bulk import among, copy_create, unsaved
from apps.core.tasks import enqueue_on_commit
from apps.jobs.models import Job

# The Celery task that pushes one stream, sent by name (worker/ sits above every app).
PUSH_STREAM_TASK = task_names.PUSH_STREAM
PUSH_STREAMS_TASK = task_names.PUSH_STREAMS
# A scheduling batch places many jobs at once: one broker message names all their streams (a publish
# cost 12-29 ms each on the loaded CI machine, which capped a cycle well below 100 jobs/s).
STREAMS_PER_MESSAGE = 100


def job_stream(job_id: int) -> str:
    return f"job:{job_id}"


def object_stream(cluster: Any, kind: str, namespace: str, name: str) -> str:
    return f"{cluster.pk}:{kind}:{namespace}/{name}"


_JOB = PushAction._meta.get_field("job")
_CLUSTER = PushAction._meta.get_field("cluster")


def _action(job: Job, cluster: Any, obj: dict, seq: int, now: dt.datetime) -> PushAction:
    """``PushAction(job=job, cluster=cluster, …)``, built by position (``unsaved``): a scheduling
    cycle builds one per object of every placed job."""
    meta = obj.get("metadata") or {}
    action = unsaved(
        PushAction,
        job_id=job.pk,
        stream=job_stream(job.pk),
        cluster_id=cluster.pk,
        attempt=job.attempt,
        seq=seq,
        verb=PushAction.Verb.APPLY,
        object=obj,
        kind=obj["kind"],
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        next_attempt_at=now,
    )
    _JOB.set_cached_value(action, job)  # the related caches, as ``job=job, cluster=cluster`` set them
    _CLUSTER.set_cached_value(action, cluster)
    return action


def push_objects(
    job: Job, allocations: Sequence[Any], cluster: Any, *, keep_names: dict[str, str] | None = None
) -> tuple[dict, ...]:
    """The objects one placed job's attempt needs, in the order they must exist: its namespace, then
    the whole group (DRA claims, the rendezvous Service, one workload per replica of a gang —
    ``workload_objects``). Allocations must have ``device`` and ``node`` loaded, the job its
    ``project``. Raises what rendering raises (e.g. ``ValueError`` for a placement no manifest can
    express)."""
    return (
        namespace_manifest(job.project),
        *workload_objects(job, allocations, cluster, attempt=job.attempt, keep_names=keep_names),
    )


def push_actions_enqueue_many(items: Iterable[tuple[Job, Sequence[Any], Any]]) -> list[PushAction]:
    """``push_actions_enqueue`` for a batch of ``(job, allocations, cluster)``."""
    return push_actions_enqueue_rendered(
        [(job, cluster, push_objects(job, allocations, cluster)) for job, allocations, cluster in items]
    )


def push_actions_enqueue_rendered(items: Sequence[tuple[Job, Any, Sequence[dict]]]) -> list[PushAction]:
    """Write the applies of ``(job, cluster, objects)`` (objects from ``push_objects``): one query for
    the next sequence numbers, one insert, one after-commit enqueue per batch of streams."""
    items = list(items)
    if not items:
        return []
    now = timezone.now()
    next_seq = {
        (row["job_id"], row["attempt"]): row["top"] + 1
        for row in PushAction.objects.filter(among("stream", [job_stream(job.pk) for job, _c, _o in items]))
        .values("job_id", "attempt")
        .annotate(top=Max("seq"))
    }
    actions: list[PushAction] = []
    for job, cluster, objects in items:
        seq = next_seq.get((job.pk, job.attempt), 0)
        for offset, obj in enumerate(objects):
            actions.append(_action(job, cluster, obj, seq + offset, now))
    copy_create(actions)  # COPY (apps.core.bulk): the cycle enqueues thousands at once
    streams = [job_stream(job.pk) for job, _c, _o in items]
    if len(streams) == 1:
        request_push(streams[0])
    else:
        for i in range(0, len(streams), STREAMS_PER_MESSAGE):
            enqueue_on_commit(PUSH_STREAMS_TASK, streams[i : i + STREAMS_PER_MESSAGE], queue="push")
    return actions


def push_actions_enqueue(*, job: Job, allocations: Sequence[Any], cluster: Any) -> list[PushAction]:
    """Write the namespace and workload applies for ``job`` on ``cluster`` (call inside the
    scheduling transaction); the push is requested after commit.

    Pushed again within one attempt (a scaled service, one that lost a node's replicas), each node's
    Deployment keeps the name it has (``deployment_names``: unchanged objects are unchanged applies,
    their pods keep running), and the objects of this attempt that the new placement no longer has
    (the Deployment of a node the service left) are deleted first."""
    live = live_objects(job, job.attempt)
    keep = {node: a.name for a in live if (node := deployment_node(a.object or {}))}
    objects = push_objects(job, allocations, cluster, keep_names=keep)
    wanted = {
        (o["kind"], (o.get("metadata") or {}).get("namespace", ""), o["metadata"]["name"]) for o in objects
    }
    stale = [a for a in live if (a.kind, a.namespace, a.name) not in wanted]
    deletes = _delete_actions(job, job.attempt, stale[::-1])  # workloads before their claims
    return deletes + push_actions_enqueue_rendered([(job, cluster, objects)])


def deployment_node(obj: dict) -> str:
    """The node a rendered Deployment's pods are pinned to ("" for any other object)."""
    if obj.get("kind") != "Deployment":
        return ""
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL, "")


def live_objects(job: Job, attempt: int) -> list[PushAction]:
    """The newest apply of each object (Namespace aside) of ``job``'s ``attempt`` that no later
    delete of the same attempt removed, in apply order."""
    newest: dict[tuple[str, str, str], PushAction] = {}
    for action in (
        PushAction.objects.filter(
            stream=job_stream(job.pk),
            attempt=attempt,
            verb__in=[PushAction.Verb.APPLY, PushAction.Verb.DELETE],
        )
        .exclude(kind="Namespace")
        .select_related("cluster")
        .order_by("seq")
    ):
        key = (action.kind, action.namespace, action.name)
        newest.pop(key, None)  # re-inserted last: dict order is the order of the newest actions
        if action.verb == PushAction.Verb.APPLY:
            newest[key] = action
    return list(newest.values())


def _next_seq(stream: str, attempt: int) -> int:
    top = PushAction.objects.filter(stream=stream, attempt=attempt).aggregate(top=Max("seq"))["top"]
    return 0 if top is None else top + 1


def _delete_actions(job: Job, attempt: int, applied: Sequence[PushAction]) -> list[PushAction]:
    """Graceful deletes of ``applied`` objects, in the order given (pushed after commit)."""
    if not applied:
        return []
    stream = job_stream(job.pk)
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
    request_push(stream)
    return actions


def workload_delete_enqueue(*, job: Job, attempt: int | None = None) -> list[PushAction]:
    """Write graceful deletes for the objects of the job's attempt (call inside the transaction that
    preempts, retries or cancels it); pushed after commit. Nothing when nothing was ever pushed."""
    attempt = job.attempt if attempt is None else attempt
    stream = job_stream(job.pk)
    # Workloads before the claims and Service they use; objects already deleted are left out.
    applied = live_objects(job, attempt)[::-1]
    if not applied:
        return []
    # Applies not yet done will never be: the job moved on.
    PushAction.objects.filter(
        stream=stream, attempt=attempt, verb=PushAction.Verb.APPLY, state=PushAction.State.PENDING
    ).update(state=PushAction.State.SUPERSEDED, last_error="not applied: superseded by a delete")
    return _delete_actions(job, attempt, applied)


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
    request_push(stream)
    return action


def request_push(stream: str | int) -> None:
    """Ask for a push of one stream once the caller's transaction commits (a job id means its job
    stream). Never fails the caller: beat's ``push_pending_task`` catches up."""
    stream = job_stream(stream) if isinstance(stream, int) else stream
    enqueue_on_commit(PUSH_STREAM_TASK, stream, queue="push")


def node_patch_enqueue(node: Any, *, removed_labels: Iterable[str] = ()) -> PushAction:
    """Write the patch that brings a Node's labels and taints in line with the ledger (inside the
    caller's transaction). Labels are merged into the live Node, so a label the ledger dropped is
    sent as ``null`` in the same patch, which deletes it (JSON merge patch, RFC 7386 §2; strategic
    merge patch does the same for a null map value: kubernetes/community,
    contributors/devel/sig-api-machinery/strategic-merge-patch.md, "Basic Patch")."""
    manifest = node_patch(node)
    for key in removed_labels:
        manifest["metadata"]["labels"][key] = None
    return push_object_enqueue(cluster=node.cluster, manifest=manifest, verb="patch")
