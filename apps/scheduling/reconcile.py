"""Reconcile: keep Suanchi's jobs in step with what the cluster actually runs.

For each cluster, the worker reads our Jobs, Deployments and pods by label (a list per kind on the
first pass, then a watch of the changes since that list; no transaction open), then walks the jobs
Suanchi believes are scheduled or running there:

* a job's workloads are one group (a gang's per-replica Jobs, an inference service's per-node
  Deployments): every replica's pod running → the job is ``running``; every batch Job complete →
  ``succeeded`` (cards released); one replica failed or deleted → the whole job's retry policy;
* a pod failed → classified into the fault runbook (``faults.py``: runtime mismatch, device not
  visible, out of memory, device lost, …) and the job's retry policy applies: another attempt after
  a backoff, avoiding the node, resuming from the checkpoint; or ``failed`` once the retries are used
  up. A hardware fault (device lost, XID / ECC errors, the device plugin refusing the card) does not
  use up a retry, and quarantines the node — its taint is pushed through the outbox;
* a pod evicted (``DisruptionTarget``: a NoExecute taint such as Suanchi's quarantine, a NotReady
  node) → retried elsewhere without using a retry, the Kubernetes reason in the job's event; the
  Job controller's ``FailureTarget`` / ``Failed`` (its pods may be gone already) → a failure; a
  Terminating pod (an old attempt or replica being deleted) is never a failure by itself; a
  multi-replica Job finishes only when ``completions`` pods succeeded;
* a batch Job with no pod at all and ``FailedCreate`` Warning events (a namespace ResourceQuota
  refused the pods: 403 ``exceeded quota``) → the Kubernetes message as a job event and the state
  reason at once; after ``POD_CREATE_REFUSED_TIMEOUT_S`` without a pod the attempt ends (retried
  per policy, failed once the retries are used up);
* a pod in CrashLoopBackOff restarted ``CRASH_LOOP_RESTARTS`` times → flagged (a job event, once per
  pod) while the job stays running; the old ReplicaSet's pods of a rolled-out Deployment (a scale
  or template change) terminate, which is never a failure;
* our object gone although it was applied → deleted behind our back: handled as a failure;
* a node Kubernetes reports NotReady, or a card the ledger marks lost, reschedules the jobs on it
  (without using a retry); a lost card is a confirmed hardware fault, so its node is quarantined.

Every state change goes through the job lifecycle (``lifecycle.py``: conditional updates), so two
reconcilers racing on one job change it once.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from apps.benchlib.services import synthetic_result
from apps.clusters.backends.base import MANAGED_BY
from apps.clusters.backends.errors import BackendError
from apps.clusters.connections import backend_for
from apps.clusters.health import clusters_in_backoff, loop_record
from apps.clusters.manifests import LABEL_ATTEMPT, LABEL_JOB
from apps.clusters.models import ClusterLoop, PushAction
from apps.clusters.outbox import job_stream
from apps.clusters.sync import outside_changes_take
from apps.core.locks import try_lock
from apps.core.stored_text import stored
from apps.inventory.models import Cluster, Device, DeviceEvent, Node
from apps.inventory.services.ledger.events import device_event_create
from apps.jobs.models import ACTIVE_STATES, Allocation, Job, JobEvent, JobState
from apps.jobs.services import job_event
from apps.scheduling.faults import is_hardware_fault, job_hardware_fault
from apps.scheduling.lifecycle import job_finish, job_retry_or_fail, job_to_running
from apps.scheduling.pod_status import classify_pod_failure, disruption, node_ready, pod_node, podless
from apps.scheduling.releasing import releases_confirm, releasing_clusters
from apps.scheduling.service_nodes import service_nodes_lost, serving_nodes

logger = logging.getLogger(__name__)

# A Job whose pods Kubernetes keeps refusing (FailedCreate: a ResourceQuota, a webhook, Pod
# Security admission) is surfaced at once (a job event and the state reason, with Kubernetes'
# message) and, when no pod was created for this long, its attempt ends: retried per the job's
# policy (a quota may have room again later), failed once its retries are used up.
POD_CREATE_REFUSED_TIMEOUT_S = 300
# The reads of one pass (paged lists of Jobs, Deployments, Pods, Nodes, Events) end within this many
# seconds in all, whatever the page count (an API server that answers, but slowly); each call is also
# bounded by the client timeout. Generous: a big cluster's pages must fit (the lock keeps the next
# period's pass of this cluster from starting meanwhile; other clusters are not held up).
RECONCILE_DEADLINE_S = 300.0

# Texts stored in events and state reasons, shown in the reader's language (apps.core.stored_text).
CRASH_LOOPING = stored(
    "container %(container)s of pod %(pod)s is crash-looping (CrashLoopBackOff, "
    "%(restarts)s restarts, last exit code %(code)s); the kubelet keeps restarting it"
)
PODS_REFUSED = stored("Kubernetes refused the pods of Job %(workload)s: %(why)s")
NO_POD_CREATED = stored("no pod could be created for %(seconds)s s: %(why)s")
CARD_LOST = stored("a card it used was lost (%(nodes)s)")
NODE_NOT_READY = stored("its node is NotReady (%(nodes)s)")
DELETED_OUTSIDE = stored("%(kind)s %(namespace)s/%(name)s was deleted outside Suanchi")
COMPLETED = stored("completed")
EVICTED = stored("pod %(pod)s evicted from %(nodes)s: %(reason)s: %(message)s")
EVICTED_NO_MESSAGE = stored("pod %(pod)s evicted from %(nodes)s: %(reason)s")
ITS_NODE = stored("its node")
POD_FAILED = stored("pod %(pod)s failed: %(reason)s")
JOB_GAVE_UP = stored("Job %(workload)s failed: %(reason)s: %(message)s")
JOB_GAVE_UP_NO_MESSAGE = stored("Job %(workload)s failed: %(reason)s")
NOT_READY_RESCHEDULED = stored("Kubernetes reports node %(node)s NotReady; its jobs are rescheduled")


@dataclass
class ReconcileResult:
    cluster: str
    checked: int = 0
    running: int = 0
    succeeded: int = 0
    retried: int = 0
    failed: int = 0
    refused: int = 0  # jobs whose pods Kubernetes refused (newly surfaced this pass)
    crash_looping: int = 0  # pods newly flagged as crash-looping this pass
    quarantined: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # The cluster could not be read (its lists failed): nothing was reconciled this pass.
    list_error: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _workload_actions(jobs: list[Job]) -> dict[int, list[PushAction]]:
    """The workload applies (batch Jobs, Deployments) of each job's current attempt — a gang has one
    per replica, an inference service spread over nodes one per node — the newest per object, in
    apply order. The group is one job: all of it must be applied before it is judged. An object a
    later delete of the same attempt removed (the Deployment of a node an inference service left)
    is no longer part of it."""
    streams = {job_stream(j.pk): j for j in jobs}
    out: dict[int, dict[tuple[str, str, str], PushAction]] = defaultdict(dict)
    rows = PushAction.objects.filter(
        stream__in=list(streams),
        verb__in=[PushAction.Verb.APPLY, PushAction.Verb.DELETE],
        kind__in=["Job", "Deployment"],
    ).order_by("attempt", "seq")
    for action in rows:
        job = streams[action.stream]
        if action.attempt == job.attempt:
            key = (action.kind, action.namespace, action.name)
            out[job.pk].pop(key, None)
            if action.verb == PushAction.Verb.APPLY:
                out[job.pk][key] = action
    return {job_id: list(group.values()) for job_id, group in out.items()}


def _quarantine(node: Node, reason: str, actor: Any, result: ReconcileResult) -> None:
    from apps.scheduling.faults import node_status_change

    if node.status in (Node.Status.QUARANTINED, Node.Status.RETIRED):
        return
    try:
        node_status_change(node=node, status=Node.Status.QUARANTINED, reason=reason[:300], actor=actor)
        result.quarantined.append(node.name)
    except Exception as e:  # noqa: BLE001 - a node that cannot move now (e.g. retired meanwhile)
        result.errors.append(f"quarantine {node.name}: {e}")


def _failure(
    job: Job,
    *,
    cluster: Cluster,
    reason: str,
    nodes: list[str],
    hardware: bool,
    actor: Any,
    result: ReconcileResult,
    infrastructure: bool = False,
    failure_class: str = "",
    blamed: bool = True,
) -> None:
    """A failed attempt: retry or fail per policy. Hardware and infrastructure faults (a lost card, a
    NotReady node) do not use up the job's retries; a hardware fault also quarantines the node. The
    next attempt avoids ``nodes`` only when the attempt failed there (``blamed``)."""
    attempt = job.attempt
    outcome = job_retry_or_fail(
        job=job,
        reason=reason,
        actor=actor,
        failed_nodes=nodes if blamed else [],
        ended_on=[] if blamed else nodes,
        count_attempt=not (hardware or infrastructure),
        failure_class=failure_class or ("device_lost" if hardware else ""),
    )
    if outcome == "retried":
        result.retried += 1
    elif outcome == "failed":
        result.failed += 1
    if hardware and outcome:
        # Proportion (faults.py): the attempt's cards there are cordoned; the node is quarantined
        # only when several cards failed.
        result.quarantined += job_hardware_fault(
            job=job, attempt=attempt, nodes=nodes, reason=reason, actor=actor
        )


# A container restarted this often and waiting in CrashLoopBackOff is flagged (a job event); the
# service keeps running — the kubelet keeps restarting it (restartPolicy Always, back-off up to 5
# minutes: Kubernetes docs "Pod Lifecycle" → "Container restarts").
CRASH_LOOP_RESTARTS = 5


def _flag_crash_loops(job: Job, pods: list[dict], actor: Any) -> int:
    """One job event per crash-looping pod (``state.waiting.reason`` CrashLoopBackOff with
    ``restartCount`` ≥ ``CRASH_LOOP_RESTARTS``). Never a failure: a Deployment's pod is restarted
    in place. Recorded as a retry that does not count against the job's policy (the kubelet's)."""
    flagged = 0
    for pod in pods:
        name = pod["metadata"]["name"]
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            restarts = int(cs.get("restartCount") or 0)
            if waiting.get("reason") != "CrashLoopBackOff" or restarts < CRASH_LOOP_RESTARTS:
                continue
            if job.events.filter(
                kind=JobEvent.Kind.RETRY, data__kubernetes="CrashLoopBackOff", data__pod=name
            ).exists():
                break
            last = ((cs.get("lastState") or {}).get("terminated") or {}).get("exitCode")
            job_event(
                job,
                kind=JobEvent.Kind.RETRY,
                message=CRASH_LOOPING
                % {"container": cs.get("name") or "?", "pod": name, "restarts": restarts, "code": last},
                actor=actor,
                data={
                    "kubernetes": "CrashLoopBackOff",
                    "pod": name,
                    "restarts": restarts,
                    "counted": False,
                },
            )
            flagged += 1
            break
    return flagged


_POD_NAME = re.compile(r'^Error creating: pods "[^"]*" is forbidden: ')


def _pod_create_refused(
    job: Job,
    *,
    cluster: Cluster,
    action: PushAction,
    events: list[dict],
    actor: Any,
    now: dt.datetime,
    result: ReconcileResult,
) -> None:
    """The Job controller could not create the pods (FailedCreate Warning events: pkg/controller/
    controller_utils.go CreatePods, "Error creating: …"): surface Kubernetes' message as a job event
    (again whenever it changes) and as the state reason; after ``POD_CREATE_REFUSED_TIMEOUT_S``
    since the first one of this attempt, end the attempt (retry per policy, or fail)."""
    latest = max(
        events, key=lambda e: (e.get("lastTimestamp") or "", e["metadata"].get("resourceVersion", ""))
    )
    why = _POD_NAME.sub("", latest.get("message") or "") or latest.get("reason") or "FailedCreate"
    message = PODS_REFUSED % {
        "workload": f"{action.namespace}/{action.name}",
        "why": why,
    }
    seen = list(
        job.events.filter(
            kind=JobEvent.Kind.PENDING, data__kubernetes="FailedCreate", data__attempt=job.attempt
        ).order_by("created_at", "id")
    )
    if not seen or seen[-1].message != message[:1000]:
        job_event(
            job,
            kind=JobEvent.Kind.PENDING,
            message=message,
            actor=actor,
            data={"kubernetes": "FailedCreate", "attempt": job.attempt, "workload": action.name},
        )
        Job.objects.filter(pk=job.pk, state=job.state, attempt=job.attempt).update(state_reason=message[:500])
        result.refused += 1
    first = seen[0].created_at if seen else now
    if now - first >= dt.timedelta(seconds=POD_CREATE_REFUSED_TIMEOUT_S):
        _failure(
            job,
            cluster=cluster,
            reason=NO_POD_CREATED % {"seconds": POD_CREATE_REFUSED_TIMEOUT_S, "why": why},
            nodes=[],
            hardware=False,
            failure_class="pod_create_refused",
            actor=actor,
            result=result,
        )


@dataclass
class _Listing:
    """What one pass read from the cluster (no transaction open while reading)."""

    workloads: dict[tuple[str, str, str], dict]  # (kind, namespace, name) -> our Job or Deployment
    pods: list[dict]
    nodes: list[dict]  # Kubernetes Node objects
    refusals: dict[str, list[dict]]  # workload uid -> its FailedCreate Warning events
    backend_name: str
    pods_by_job: dict[tuple[str, str], list[dict]] = field(default_factory=dict)  # (job id, attempt) -> pods


@dataclass
class _Pass:
    """One reconcile pass of one cluster: what it read and what it counts."""

    cluster: Cluster
    actor: Any
    now: dt.datetime
    result: ReconcileResult
    listing: _Listing
    actions: dict[int, list[PushAction]]
    serving: dict[int, set[str]]


# ``readback(cluster=, pods=, now=, actor=)``: given the pods a pass listed (the worker passes
# telemetry's ``apps.telemetry.plugin_readback.plugin_readback``: the chips device plugins wrote on them).
PodsReadback = Callable[..., Any]


def reconcile_cluster(
    *,
    cluster: Cluster,
    actor: Any = "reconciler",
    now: dt.datetime | None = None,
    timeout: float | None = None,
    deadline_s: float | None = RECONCILE_DEADLINE_S,
    readback: PodsReadback | None = None,
) -> ReconcileResult:
    """One pass over one cluster. Network reads first (no transaction), then one short transaction
    per job change. Each Kubernetes call waits at most ``timeout`` seconds (the backend's default
    when None) and the reads together at most ``deadline_s``. ``readback`` (optional) is called with
    the pods listed; its error is logged and never stops the pass."""
    now = now or timezone.now()
    result = ReconcileResult(cluster=cluster.slug)
    jobs = list(
        Job.objects.filter(
            state__in=ACTIVE_STATES,
            allocations__node__cluster=cluster,
            allocations__released_at__isnull=True,
            allocations__releasing_since__isnull=True,
        )
        .distinct()
        .select_related("project")
    )
    # What we know was applied is read BEFORE the cluster: an object applied after our list (a push
    # racing this pass) must not look "deleted behind our back".
    actions = _workload_actions(jobs)
    listing = _cluster_read(cluster, result, timeout=timeout, deadline_s=deadline_s)
    if listing is None:
        return result
    not_ready = {n["metadata"]["name"] for n in listing.nodes if not node_ready(n)}
    # Cards let go of earlier are released once this listing shows their objects and pods gone.
    releases_confirm(
        cluster=cluster,
        workloads=listing.workloads,
        pods=listing.pods,
        nodes=listing.nodes,
        listed_at=now,
        actor=actor,
    )
    if readback is not None:
        # What the device plugins wrote on the pods (the chips they gave) is read back by the caller's
        # layer (telemetry): an error there is logged, never the end of the pass.
        try:
            readback(cluster=cluster, pods=listing.pods, now=now, actor=actor)
        except Exception as e:  # noqa: BLE001
            logger.warning("cluster %s: pod read-back %s failed: %r", cluster.slug, _name(readback), e)
    lost, hardware_nodes = _jobs_on_lost_nodes(jobs, not_ready)
    for name in not_ready:
        _note_not_ready(cluster, name, actor)
    # serving: where each inference service's replicas hold cards.
    run = _Pass(cluster, actor, now, result, listing, actions, serving_nodes(jobs))
    for job in jobs:
        result.checked += 1
        if job.pk in lost:
            nodes = sorted(lost[job.pk])
            hardware = bool(hardware_nodes & set(nodes))
            why = CARD_LOST if hardware else NODE_NOT_READY
            _failure(
                job,
                cluster=cluster,
                reason=why % {"nodes": ", ".join(nodes)},
                nodes=nodes,
                hardware=hardware,
                infrastructure=True,
                actor=actor,
                result=result,
            )
            continue
        _job_reconcile(run, job)
    return result


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", repr(fn))


def _cluster_read(
    cluster: Cluster, result: ReconcileResult, *, timeout: float | None, deadline_s: float | None
) -> _Listing | None:
    """The pass's reads: our Jobs, Deployments and pods, the Nodes, and (only when a Job has no pod)
    the FailedCreate events. None when the lists failed (``result.list_error`` says why)."""
    backend = backend_for(cluster, **({"timeout": timeout} if timeout else {}))
    if deadline_s is not None and hasattr(backend, "set_deadline"):
        backend.set_deadline(deadline_s)
    try:
        # Read from the backend's watched views (apps.clusters.backends.kubernetes.KubernetesBackend.list_watched:
        # the first pass lists, later passes apply only the changes since), every kind at the same
        # time (list_watched_kinds); read only.
        jobs_live, deployments, pods, k8s_nodes = backend.list_watched_kinds(
            [("Job", MANAGED_BY), ("Deployment", MANAGED_BY), ("Pod", MANAGED_BY), ("Node", "")]
        )
        workloads = {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in (*jobs_live, *deployments)
        }
        # Why a Job has no pod at all is only in its Events (one more list, only when needed).
        refusals: dict[str, list[dict]] = defaultdict(list)
        if any(podless(o) for o in workloads.values()):
            try:
                events = backend.list_events(field_selector="reason=FailedCreate")
            except BackendError as e:  # e.g. no RBAC for events yet: the rest of the pass still runs
                result.errors.append(f"list events: {e.message}")
                events = []
            for event in events:
                uid = (event.get("involvedObject") or {}).get("uid")
                if uid and event.get("type") == "Warning":
                    refusals[uid].append(event)
    except BackendError as e:
        result.errors.append(f"list: {e.message}")
        result.list_error = e.message
        return None
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    pods_by_job: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if LABEL_JOB in labels:
            pods_by_job[(labels[LABEL_JOB], labels.get(LABEL_ATTEMPT, ""))].append(pod)
    return _Listing(workloads, pods, k8s_nodes, refusals, backend.name, pods_by_job)


def _jobs_on_lost_nodes(jobs: list[Job], not_ready: set[str]) -> tuple[dict[int, set[str]], set[str]]:
    """Nodes lost to Kubernetes, and cards the ledger marks lost, take their jobs with them:
    (job id -> node names, the nodes with a lost card: a hardware fault)."""
    lost = defaultdict(set)  # job id -> node names
    hardware_nodes: set[str] = set()
    for job_id, node_name in Allocation.objects.filter(
        job__in=jobs, released_at__isnull=True, releasing_since__isnull=True, node__name__in=not_ready
    ).values_list("job_id", "node__name"):
        lost[job_id].add(node_name)
    for job_id, node_name in Allocation.objects.filter(
        job__in=jobs,
        released_at__isnull=True,
        releasing_since__isnull=True,
        device__health=Device.Health.LOST,
    ).values_list("job_id", "node__name"):
        lost[job_id].add(node_name)
        hardware_nodes.add(node_name)
    return lost, hardware_nodes


def _job_reconcile(run: _Pass, job: Job) -> None:
    """One job of the pass, its workloads all pushed: gone, complete, evicted, a replica failed, given
    up by the Job controller, refused pods, or running — the first that applies."""
    cluster, actor, result, listing = run.cluster, run.actor, run.result, run.listing
    group = run.actions.get(job.pk) or []
    if not group or any(a.state != PushAction.State.APPLIED for a in group):
        return  # not (all) pushed yet (or the push failed and is handled there)
    objs = [listing.workloads.get((a.kind, a.namespace, a.name)) for a in group]
    gone = [a for a, o in zip(group, objs, strict=True) if o is None]
    if gone:
        # One replica's object gone is the whole group's failure (a gang cannot run without it).
        _failure(
            job,
            cluster=cluster,
            reason=DELETED_OUTSIDE
            % {"kind": gone[0].kind, "namespace": gone[0].namespace, "name": gone[0].name},
            nodes=[],
            hardware=False,
            actor=actor,
            result=result,
        )
        return
    # Job pods carry the attempt; a Deployment's pods do not (its name has no attempt either).
    pods_by_job = listing.pods_by_job
    job_pods = pods_by_job.get((str(job.pk), str(job.attempt))) or pods_by_job.get((str(job.pk), ""), [])
    if job.pk in run.serving:  # a service's pods on a node it let go of are ending: not its verdict
        job_pods = [p for p in job_pods if pod_node(p) in run.serving[job.pk]]
    # A pod being deleted (Terminating: an old ReplicaSet's, a scaled-down replica, one the
    # garbage collector removes) is never a failure of its own: it ends Failed before it goes
    # (pkg/registry/core/pod/strategy.go). Only an eviction (DisruptionTarget) or the Job's own
    # verdict below says the attempt failed.
    evicted = [p for p in job_pods if disruption(p)]
    job_pods = [p for p in job_pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    phases = [(p.get("status") or {}).get("phase") for p in job_pods]
    conditions = [
        {
            c.get("type"): c
            for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"
        }
        for obj in objs
    ]
    batch = group[0].kind == "Job"
    # batch/v1 Job: done when Complete (SuccessCriteriaMet precedes it), i.e. ``completions``
    # pods succeeded (pkg/controller/job); one succeeded replica of several is not the job —
    # neither is one Job of a gang's per-replica Jobs: every one of them must be complete.
    completions = sum(
        int((obj.get("spec") or {}).get("completions") or (obj.get("spec") or {}).get("parallelism") or 1)
        for obj in objs
    )
    complete = batch and all("Complete" in c or "SuccessCriteriaMet" in c for c in conditions)
    if complete or (
        batch and phases.count("Succeeded") >= completions and all(ph == "Succeeded" for ph in phases)
    ):
        _job_complete(run, job)
    elif evicted:
        _job_evicted(run, job, evicted)
    elif failed := [
        p for p in job_pods if (p.get("status") or {}).get("phase") == "Failed" and not disruption(p)
    ]:
        # One replica failed: the whole group's attempt ends (the retry policy applies to all of
        # it; the retry deletes every replica's objects through the outbox).
        reason, key = classify_pod_failure(failed[0])
        _failure(
            job,
            cluster=cluster,
            reason=POD_FAILED % {"pod": failed[0]["metadata"]["name"], "reason": reason},
            nodes=sorted({pod_node(p) for p in failed} - {""}),
            hardware=is_hardware_fault(key),
            failure_class=key,
            actor=actor,
            result=result,
        )
    elif not (batch and _job_gave_up(run, job, group, conditions)):
        _job_running_or_refused(run, job, group, objs, job_pods, phases, batch=batch, completions=completions)


def _job_complete(run: _Pass, job: Job) -> None:
    if job.state == JobState.SCHEDULED:
        job_to_running(job=job, actor=run.actor)
    if job_finish(job=job, succeeded=True, reason=COMPLETED, actor=run.actor):
        run.result.succeeded += 1
        if job.kind == Job.Kind.BENCHMARK and run.listing.backend_name == "simulated":
            # The simulated cluster runs no benchmark image: it reports a synthetic figure made
            # from the catalog's peak (marked synthetic), as a real run would post its own.
            synthetic_result(job=job)


def _job_evicted(run: _Pass, job: Job, evicted: list[dict]) -> None:
    """pkg/controller/tainteviction (or the eviction API / preemption): the node, not the workload,
    ended this attempt — retried elsewhere without using up a retry. An inference service running on
    other nodes too loses only the evicted node's replicas."""
    cond = disruption(evicted[0])
    nodes = sorted({pod_node(p) for p in evicted} - {""})
    why = (
        (EVICTED if cond.get("message") else EVICTED_NO_MESSAGE)
        % {
            "pod": evicted[0]["metadata"]["name"],
            "nodes": ", ".join(nodes) or ITS_NODE,
            "reason": cond.get("reason") or "DisruptionTarget",
            "message": cond.get("message") or "",
        }
    ).rstrip(": ")
    # Not avoided for blame: the ledger learns the taint that evicted it (the engine keeps
    # the next attempt off the node while the taint is there).
    outside_changes_take(
        cluster=run.cluster,
        nodes=[n for n in run.listing.nodes if n["metadata"]["name"] in nodes],
        actor=run.actor,
    )
    if nodes and service_nodes_lost(job=job, nodes=nodes, reason=why, actor=run.actor):
        return
    _failure(
        job,
        cluster=run.cluster,
        reason=why,
        nodes=nodes,
        hardware=False,
        infrastructure=True,
        blamed=False,  # the eviction, not the job, ended it: the node is not avoided
        actor=run.actor,
        result=run.result,
    )


def _job_gave_up(run: _Pass, job: Job, group: list[PushAction], conditions: list[dict]) -> bool:
    """The Job controller gave up (its pods may already be gone): BackoffLimitExceeded,
    DeadlineExceeded, PodFailurePolicy … — the Kubernetes reason goes into the job's event. False
    when no Job of the group carries such a verdict."""
    verdicts = [
        (a, c.get("FailureTarget") or c.get("Failed"))
        for a, c in zip(group, conditions, strict=True)
        if c.get("FailureTarget") or c.get("Failed")
    ]
    if not verdicts:
        return False
    gave_up, verdict = verdicts[0]
    _failure(
        job,
        cluster=run.cluster,
        reason=(
            (JOB_GAVE_UP if verdict.get("message") else JOB_GAVE_UP_NO_MESSAGE)
            % {
                "workload": f"{gave_up.namespace}/{gave_up.name}",
                "reason": verdict.get("reason") or verdict.get("type"),
                "message": verdict.get("message") or "",
            }
        ).rstrip(": "),
        nodes=[],
        hardware=False,
        actor=run.actor,
        result=run.result,
    )
    return True


def _job_running_or_refused(
    run: _Pass,
    job: Job,
    group: list[PushAction],
    objs: list[dict],
    job_pods: list[dict],
    phases: list,
    *,
    batch: bool,
    completions: int,
) -> None:
    """Crash loops flagged; refused pods surfaced; else a batch job runs once every replica's pod runs
    (a gang half up is not running yet), an inference service once a replica serves."""
    run.result.crash_looping += _flag_crash_loops(job, job_pods, run.actor)
    refusals = run.listing.refusals
    refused = next(
        (
            (a, refusals[uid])
            for a, obj in zip(group, objs, strict=True)
            if (uid := (obj.get("metadata") or {}).get("uid", "")) in refusals and podless(obj)
        ),
        None,
    )
    if refused is not None:
        _pod_create_refused(
            job,
            cluster=run.cluster,
            action=refused[0],
            events=refused[1],
            actor=run.actor,
            now=run.now,
            result=run.result,
        )
        return
    up = phases.count("Running") + phases.count("Succeeded") >= completions if batch else "Running" in phases
    if up and job.state == JobState.SCHEDULED and job_to_running(job=job, actor=run.actor):
        run.result.running += 1


def _note_not_ready(cluster: Cluster, name: str, actor: Any) -> None:
    """One warning event per NotReady episode (not one per reconcile pass)."""
    from apps.core.audit import actor_fields

    node = Node.objects.filter(cluster=cluster, name=name).first()
    if node is None:
        return
    last = node.events.order_by("-created_at", "-id").values_list("kind", flat=True).first()
    if last == DeviceEvent.Kind.NOT_READY:
        return
    device_event_create(
        node=node,
        kind=DeviceEvent.Kind.NOT_READY,
        severity=DeviceEvent.Severity.WARNING,
        message=NOT_READY_RESCHEDULED % {"node": name},
        actor_label=actor_fields(actor)["actor_label"],
    )


# One reconcile of a cluster at a time (apps.core.locks: dies with its holder, no expiry to tune): a
# pass that waits on a slow API server makes the next period's task for that cluster skip, never
# run beside it; the other clusters' tasks take their own locks.
RECONCILE_LOCK = "suanchi:reconcile:cluster:%d"


def reconcile_cluster_ids() -> list[int]:
    """Clusters with something to reconcile: jobs with live allocations there, or cards whose release
    waits for the cluster to confirm their objects gone."""
    cluster_ids = (
        Allocation.objects.filter(released_at__isnull=True, job__state__in=ACTIVE_STATES)
        .values_list("node__cluster_id", flat=True)
        .distinct()
    )
    return sorted(
        Cluster.objects.filter(pk__in=[*cluster_ids, *releasing_clusters()]).values_list("pk", flat=True)
    )


def reconcile_due_clusters(*, now: dt.datetime | None = None) -> tuple[list[int], list[int]]:
    """(clusters to reconcile this period, clusters skipped because their last pass failed and their
    backoff has not run out)."""
    waiting = clusters_in_backoff(loop=ClusterLoop.Loop.RECONCILE, now=now)
    ids = reconcile_cluster_ids()
    return [pk for pk in ids if pk not in waiting], [pk for pk in ids if pk in waiting]


def reconcile_cluster_run(
    *,
    cluster_id: int,
    actor: Any = "reconciler",
    now: dt.datetime | None = None,
    timeout: float | None = None,
    force: bool = False,
    readback: PodsReadback | None = None,
) -> dict:
    """One cluster's periodic pass (the per-cluster task): skipped when the cluster is gone, backing
    off after failures (unless ``force``) or already being reconciled by another worker; otherwise
    ``reconcile_cluster`` under the cluster's lock, and its outcome recorded on the cluster
    (``apps.clusters.health``: a pass whose lists failed marks it unreachable and backs off)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return {"cluster_id": cluster_id, "skipped": "gone"}
    if not force and cluster.pk in clusters_in_backoff(loop=ClusterLoop.Loop.RECONCILE, now=now):
        return {"cluster": cluster.slug, "skipped": "backing off after failures"}
    with try_lock(RECONCILE_LOCK % cluster.pk, holder="reconcile") as taken:
        if not taken:
            return {"cluster": cluster.slug, "skipped": "another reconcile of this cluster is running"}
        started = timezone.now()
        try:
            result = reconcile_cluster(
                cluster=cluster, actor=actor, now=now, timeout=timeout, readback=readback
            )
        except BackendError as e:  # no client at all (e.g. an unreadable kubeconfig)
            loop_record(
                cluster=cluster, loop=ClusterLoop.Loop.RECONCILE, error=e, started_at=started, actor=actor
            )
            return {"cluster": cluster.slug, "list_error": e.message, "errors": [e.message]}
        except Exception as e:
            try:
                loop_record(
                    cluster=cluster,
                    loop=ClusterLoop.Loop.RECONCILE,
                    error=repr(e),
                    started_at=started,
                    actor=actor,
                )
            except Exception:  # noqa: BLE001 - e.g. the database is gone too: the first error counts
                logger.exception("could not record the failed reconcile of %s", cluster)
            raise
        loop_record(
            cluster=cluster,
            loop=ClusterLoop.Loop.RECONCILE,
            error=result.list_error or None,
            started_at=started,
            actor=actor,
        )
    return result.as_dict()


def reconcile_all(*, actor: Any = "reconciler", readback: PodsReadback | None = None) -> list[dict]:
    """Reconcile every cluster that has active jobs, one after the other (commands, tests; the worker
    runs one task per cluster instead). One cluster's failure does not stop the others; a cluster
    being reconciled by a worker right now is skipped."""
    out = []
    for cluster_id in reconcile_cluster_ids():
        try:
            out.append(
                reconcile_cluster_run(cluster_id=cluster_id, actor=actor, force=True, readback=readback)
            )
        except Exception as e:  # noqa: BLE001
            logger.exception("reconcile of cluster %s failed", cluster_id)
            out.append({"cluster_id": cluster_id, "errors": [str(e)]})
    return out
