"""What a user reads of a job's pods on the job page (issue 21): their events and a log tail.

One entry point, :func:`job_pod_report`, asks the job's cluster through the backend interface
(``pod_events`` / ``pod_log``), so the page never knows whether the cluster is a real one (the
official ``kubernetes`` client) or the simulation (synthetic events and lines made from the pod's
real lifecycle, marked simulated). Nothing is written; every failure becomes a message in the
report, never an exception: a cluster that does not answer within ``timeout`` seconds is a sentence
on the page, not a 500.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from apps.clusters.backend import LOG_LIMIT_BYTES, LOG_TAIL_LINES, BackendError
from apps.clusters.manifests import LABEL_JOB, MANAGED_BY, MANAGED_BY_KEY, dns_label, label_value

# The page waits at most this long for each call to a cluster (connect + answer).
TIMEOUT_S = 3.0
# Events are read for the newest pods only (a job retried many times keeps few pods anyway).
PODS_WITH_EVENTS = 5
EVENTS_SHOWN = 50


@dataclass
class PodReport:
    cluster: str = ""
    simulated: bool = False
    pods: list[dict] = field(default_factory=list)  # {"name", "phase", "node", "restarts", "reason"}
    events: list[dict] = field(default_factory=list)  # oldest first: {"at", "type", "reason", ...}
    log: str = ""
    log_pod: str = ""
    log_container: str = ""
    # Why there is no log to show (the container has not started, the pod is gone), or "".
    log_note: str = ""
    # The cluster could not be asked (unreachable, refused): the page shows this instead.
    error: str = ""


def _job_cluster(job: Any):
    """The cluster the job runs (or last ran) on: its newest allocation's node's, else its pushes'."""
    from apps.inventory.models import Cluster
    from apps.jobs.models import Allocation

    cluster_id = (
        Allocation.objects.filter(job=job)
        .order_by("-started_at", "-id")
        .values_list("node__cluster_id", flat=True)
        .first()
    )
    if cluster_id is None:
        from apps.clusters.models import PushAction

        cluster_id = (
            PushAction.objects.filter(job=job).order_by("-id").values_list("cluster_id", flat=True).first()
        )
    return Cluster.objects.filter(pk=cluster_id).first() if cluster_id else None


def _when(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _pod_row(pod: dict) -> dict:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    reason = ""
    for cs in statuses:
        state = cs.get("state") or {}
        for key in ("waiting", "terminated"):
            if state.get(key, {}).get("reason"):
                reason = state[key]["reason"]
    return {
        "name": pod["metadata"]["name"],
        "phase": status.get("phase", ""),
        "node": spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname", ""),
        "restarts": sum(int(cs.get("restartCount") or 0) for cs in statuses),
        "reason": reason or status.get("reason", ""),
        "terminating": bool(pod["metadata"].get("deletionTimestamp")),
        "containers": [c.get("name", "") for c in spec.get("containers") or []],
        "created": _when(pod["metadata"].get("creationTimestamp")),
    }


def _event_row(event: dict, pod: str) -> dict:
    series = event.get("series") or {}
    at = (
        _when(series.get("lastObservedTime"))
        or _when(event.get("lastTimestamp"))
        or _when(event.get("eventTime"))
        or _when(event.get("firstTimestamp"))
        or _when((event.get("metadata") or {}).get("creationTimestamp"))
    )
    source = event.get("source") or {}
    return {
        "at": at,
        "type": event.get("type", ""),
        "reason": event.get("reason", ""),
        "message": event.get("message", ""),
        "count": int(series.get("count") or event.get("count") or 1),
        "source": source.get("component") or event.get("reportingComponent") or "",
        "pod": pod,
    }


def job_pod_report(
    job: Any,
    *,
    timeout: float = TIMEOUT_S,
    tail_lines: int = LOG_TAIL_LINES,
    limit_bytes: int = LOG_LIMIT_BYTES,
) -> PodReport:
    """The job's pods, their newest events and the log tail of the newest pod's first container."""
    from apps.clusters.connections import backend_for

    report = PodReport()
    cluster = _job_cluster(job)
    if cluster is None:
        return report
    report.cluster = cluster.name
    report.simulated = cluster.backend == cluster.Backend.SIMULATED
    namespace = dns_label(job.project.namespace or job.project.slug)
    selector = f"{MANAGED_BY_KEY}={MANAGED_BY},{LABEL_JOB}={label_value(job.pk)}"
    backend = None
    try:
        backend = backend_for(cluster, timeout=timeout) if not report.simulated else backend_for(cluster)
        if hasattr(backend, "set_deadline"):  # the whole report, every call together, is bounded too
            backend.set_deadline(timeout * 2)
        pods = backend.list_owned("Pod", namespace, selector)
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
        report.pods = [_pod_row(p) for p in reversed(pods)]  # newest first
        events = []
        for row in report.pods[:PODS_WITH_EVENTS]:
            events += [_event_row(e, row["name"]) for e in backend.pod_events(namespace, row["name"])]
        epoch = dt.datetime.min.replace(tzinfo=dt.UTC)
        events.sort(key=lambda e: e["at"] or epoch)  # oldest first, as ``kubectl describe`` lists them
        report.events = events[-EVENTS_SHOWN:]
        if report.pods:
            newest = report.pods[0]
            report.log_pod = newest["name"]
            report.log_container = newest["containers"][0] if newest["containers"] else ""
            try:
                report.log = backend.pod_log(
                    namespace,
                    newest["name"],
                    container=report.log_container or None,
                    tail_lines=tail_lines,
                    limit_bytes=limit_bytes,
                )
            except BackendError as e:
                if e.status not in (400, 404):
                    raise
                # 400: the container is waiting to start; 404: the pod went away meanwhile.
                report.log_note = e.message
    except BackendError as e:
        report.error = _("The cluster %(cluster)s could not be asked: %(error)s") % {
            "cluster": cluster.name,
            "error": e.message,
        }
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    return report
