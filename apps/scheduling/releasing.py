"""Releasing allocations: cards a job let go of are released only once nothing can run on them.

When a job is cancelled, retried, preempted or failed after its objects were pushed, the lifecycle
(``lifecycle.hold_until_gone``) queues Background deletes of the attempt's objects and marks its
allocations *releasing* (``Allocation.releasing_since``): still active (``released_at`` null), so the
engine and the database's one-whole-card constraint keep the cards taken. A Background delete
removes a Job or Deployment at once, but the garbage collector deletes its pods gracefully: they
stay Terminating up to ``terminationGracePeriodSeconds`` (default 30 s), the kubelet then kills
the containers and the pod ends Failed or Succeeded before it is removed (Kubernetes docs "Pod
Lifecycle" → "Termination of Pods"; "Garbage Collection" → "Background cascading deletion"). The
cards are in use until then.

``releases_confirm`` runs in every reconcile pass with what that pass listed (no extra call): an
attempt's releasing rows on a node are released when

* every delete of that attempt was sent before the listing began (the outbox row is applied), and
  no object it deleted is listed any more (a Job's name carries the attempt; a Deployment keeps its
  name across attempts, so for it only its old pods count), and
* no pod of that attempt on the node is still running: none listed, or only pods in a terminal
  phase (the kubelet has stopped their containers; its device manager frees the devices of pods
  that are no longer active — kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go,
  ``UpdateAllocatedDevices``), or
* the node is gone from the cluster, or NotReady for longer than ``NOT_READY_RELEASE_S`` (the
  default 300 s ``tolerationSeconds`` of ``node.kubernetes.io/not-ready`` / ``unreachable`` that
  the DefaultTolerationSeconds admission plugin adds to every pod — Kubernetes docs "Taints and
  Tolerations" → "Taint based Evictions").

Each release writes one ``released`` job event with what was confirmed.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from apps.clusters.manifests import HOSTNAME_LABEL, LABEL_ATTEMPT, LABEL_JOB
from apps.clusters.models import PushAction
from apps.clusters.outbox import job_stream
from apps.core.stored_text import stored
from apps.jobs.models import Allocation
from apps.scheduling.allocations import allocations_release

NOT_READY_RELEASE_S = 300
TERMINAL_PHASES = ("Succeeded", "Failed")

# Texts stored in job events, shown in the reader's language (apps.core.stored_text).
NODE_GONE = stored("node %(node)s is gone from the cluster")
NODE_NOT_READY_LONG = stored("node %(node)s has been NotReady for over %(seconds)s s")
OBJECTS_GONE = stored("its objects and pods are gone from node %(node)s")
RELEASED_CONFIRMED = stored("%(count)s allocation(s) released: Kubernetes confirmed %(why)s")


def _node_name(pod: dict) -> str:
    """The node a pod is bound to, or pinned to by Suanchi's ``kubernetes.io/hostname`` selector."""
    spec = pod.get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL) or ""


def _not_ready_since(node: dict) -> dt.datetime | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return parse_datetime(cond.get("lastTransitionTime") or "") or None
    return None


def _holds_cards(pod: dict) -> bool:
    """A pod whose containers may still run (not in a terminal phase)."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def releasing_clusters() -> list[int]:
    """Clusters with releasing allocations (reconcile visits them even without an active job)."""
    return list(
        Allocation.objects.filter(released_at__isnull=True, releasing_since__isnull=False)
        .values_list("node__cluster_id", flat=True)
        .distinct()
    )


def releases_confirm(
    *,
    cluster: Any,
    workloads: dict[tuple[str, str, str], dict],
    pods: list[dict],
    nodes: list[dict],
    listed_at: dt.datetime,
    actor: Any = "reconciler",
) -> int:
    """Release the releasing allocations of ``cluster`` whose objects and pods the listing (read at
    or after ``listed_at``) shows gone. Returns the number of allocations released."""
    rows = list(
        Allocation.objects.filter(
            node__cluster=cluster, released_at__isnull=True, releasing_since__isnull=False
        ).values_list("pk", "job_id", "attempt", "node__name")
    )
    if not rows:
        return 0
    groups: dict[tuple[int, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for pk, job_id, attempt, node in rows:
        groups[(job_id, attempt)][node].append(pk)
    deletes: dict[tuple[int, int], list[PushAction]] = defaultdict(list)
    for action in PushAction.objects.filter(
        stream__in=[job_stream(job_id) for job_id, _a in groups], verb=PushAction.Verb.DELETE
    ):
        deletes[(action.job_id, action.attempt)].append(action)
    by_job: dict[str, list[dict]] = defaultdict(list)
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if LABEL_JOB in labels:
            by_job[labels[LABEL_JOB]].append(pod)
    listed_nodes = {n["metadata"]["name"]: n for n in nodes}
    released = 0
    for (job_id, attempt), per_node in sorted(groups.items()):
        sent = deletes.get((job_id, attempt), [])
        if any(
            a.state == PushAction.State.PENDING or (a.applied_at and a.applied_at > listed_at) for a in sent
        ):
            continue  # a delete not sent yet (or sent after the listing): look again next pass
        objects = [a for a in sent if a.state == PushAction.State.APPLIED]
        if any(a.kind != "Deployment" and (a.kind, a.namespace, a.name) in workloads for a in objects):
            continue  # the Job is still there (a finalizer, a Foreground delete)
        deployment = any(a.kind == "Deployment" for a in sent)
        candidates = []
        for pod in by_job.get(str(job_id), []):
            labels = pod["metadata"].get("labels") or {}
            if LABEL_ATTEMPT in labels:
                if labels[LABEL_ATTEMPT] == str(attempt):
                    candidates.append(pod)
            elif deployment and (
                pod["metadata"].get("deletionTimestamp")
                or not any(("Deployment", a.namespace, a.name) in workloads for a in sent)
            ):
                # A Deployment's pods carry no attempt: the old ones are those being deleted (or
                # any, while no Deployment of the job exists).
                candidates.append(pod)
        for node_name, pks in sorted(per_node.items()):
            node = listed_nodes.get(node_name)
            if node is None:
                why = NODE_GONE
            else:
                since = _not_ready_since(node)
                if since is not None and listed_at - since >= dt.timedelta(seconds=NOT_READY_RELEASE_S):
                    why = NODE_NOT_READY_LONG
                elif any(_node_name(p) == node_name and _holds_cards(p) for p in candidates):
                    continue  # still Terminating (or running) there
                else:
                    why = OBJECTS_GONE
            released += _release(job_id, pks, why, {"node": node_name, "seconds": NOT_READY_RELEASE_S}, actor)
    return released


@transaction.atomic
def _release(job_id: int, pks: list[int], why: str, params: dict, actor: Any) -> int:
    return allocations_release(
        job=job_id,
        actor=actor,
        rows=Allocation.objects.filter(pk__in=pks, released_at__isnull=True, releasing_since__isnull=False),
        msgid=RELEASED_CONFIRMED,
        params={"why": {"msgid": why, "params": params}},
        data={"allocations": sorted(pks), "confirmed": True},
    )
