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
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from apps.clusters.ascend import ASCEND_REAL_ANNOTATION, ascend_real_chips
from apps.clusters.backends.base import LOG_LIMIT_BYTES, LOG_TAIL_LINES
from apps.clusters.backends.errors import BackendError
from apps.clusters.manifests import LABEL_JOB, MANAGED_BY, MANAGED_BY_KEY, dns_label, label_value
from apps.core.errors import ParseFailed

# The page waits at most this long for each call to a cluster (connect + answer).
TIMEOUT_S = 3.0
# Events are read for the newest pods only (a job retried many times keeps few pods anyway).
PODS_WITH_EVENTS = 5
EVENTS_SHOWN = 50


@dataclass
class PodReport:
    cluster: str = ""
    simulated: bool = False
    pods: list[dict] = field(default_factory=list)  # {"name", "phase", "node", "restarts", "reason", …}
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
        # Huawei: the physical chips the Ascend device plugin gave the pod (huawei.com/AscendReal),
        # None when it wrote none (not an Ascend pod, a vNPU, not allocated yet) or it does not parse.
        "ascend_chips": _ascend_chips(pod),
    }


def _ascend_chips(pod: dict) -> list[int] | None:
    value = (pod["metadata"].get("annotations") or {}).get(ASCEND_REAL_ANNOTATION)
    if not value:
        return None
    try:
        return ascend_real_chips(value)
    except ParseFailed:
        return None


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


# A line of the simulator's log starts with its simulated instant (``SimulatedBackend._pod_log``).
_SIMULATED_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)( \[simulated\] )", re.M)


@dataclass
class SimulatedClock:
    """Simulated instants → the job's real times (issue 29 §2).

    A simulated cluster keeps its own clock: it runs ``SIMULATED_TIME_SCALE`` times faster than the
    wall clock (60 × in the demo) from the moment the cluster was first used, and the demo's jobs are
    backdated (their history is moved hours back, ``apps.demo``), so the raw stamps of its events and
    log lines lie hours or days away from the job's start. The page stamps them from the job's own
    lifecycle instead: the newest pod's start is the job's ``started_at`` (before it runs: the pod's
    creation is the moment its cards were allocated), its end is the job's ``finished_at`` — or, while
    it still runs, the simulated now is the real now; between two such anchors the instants are
    interpolated, outside them a simulated second is ``1 / time_scale`` real seconds."""

    sim_anchor: dt.datetime
    real_anchor: dt.datetime
    time_scale: float = 1.0
    sim_end: dt.datetime | None = None
    real_end: dt.datetime | None = None

    def real(self, at: dt.datetime | None) -> dt.datetime | None:
        if at is None:
            return None
        scale = self.time_scale if self.time_scale > 0 else 1.0
        if self.sim_end is not None and self.real_end is not None and self.sim_end > self.sim_anchor:
            if at >= self.sim_end:
                return self.real_end + (at - self.sim_end) / scale
            if at >= self.sim_anchor:
                share = (at - self.sim_anchor) / (self.sim_end - self.sim_anchor)
                return self.real_anchor + (self.real_end - self.real_anchor) * share
        return self.real_anchor + (at - self.sim_anchor) / scale

    def log(self, text: str) -> str:
        """The log with each simulated line's stamp replaced by its real time in the platform's time
        zone (ISO 8601 with the offset, e.g. ``2026-12-03T14:05:10+08:00``)."""

        def stamp(match: re.Match) -> str:
            real = self.real(_when(match.group(1)))
            if real is None:
                return match.group(0)
            return timezone.localtime(real).isoformat(timespec="seconds") + match.group(2)

        return _SIMULATED_LINE.sub(stamp, text)


def simulated_clock(
    job: Any,
    pods: list[dict],
    time_scale: float = 1.0,
    *,
    sim_now: dt.datetime | None = None,
    now: dt.datetime | None = None,
) -> SimulatedClock | None:
    """The clock that maps ``pods``' simulated stamps (raw pod objects, any order) onto ``job``'s real
    times; None when there is no pod or nothing real to anchor on. ``sim_now``: the cluster's
    simulated instant now (``simulated_now()``), the end anchor of a pod that still runs."""
    if not pods:
        return None
    newest = max(pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
    meta, status = newest["metadata"], newest.get("status") or {}
    started = _when(status.get("startTime"))
    created = _when(meta.get("creationTimestamp"))
    if started is not None and getattr(job, "started_at", None):
        sim_anchor, real_anchor = started, job.started_at
    elif created is not None:
        from apps.jobs.models import Allocation

        allocated = (
            Allocation.objects.filter(job=job)
            .order_by("-started_at", "-id")
            .values_list("started_at", flat=True)
            .first()
        )
        real_anchor = allocated or getattr(job, "created_at", None)
        if real_anchor is None:
            return None
        sim_anchor = created
    else:
        return None
    sim_end = None
    for cs in status.get("containerStatuses") or []:
        finished = _when(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if finished is not None:
            sim_end = finished if sim_end is None else max(sim_end, finished)
    sim_end = sim_end or _when(meta.get("deletionTimestamp"))
    real_end = getattr(job, "finished_at", None)
    if sim_end is None and real_end is None and sim_now is not None:
        sim_end, real_end = sim_now, now or timezone.now()  # still running: its now is ours
    if sim_end is None or real_end is None or real_end < real_anchor:
        sim_end = real_end = None
    return SimulatedClock(sim_anchor, real_anchor, time_scale, sim_end, real_end)


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
        # A simulated cluster's own clock is not the job's: its stamps are mapped onto the job's times.
        clock = None
        if report.simulated and pods:
            sim_now = backend.simulated_now() if hasattr(backend, "simulated_now") else None
            clock = simulated_clock(job, pods, getattr(backend, "time_scale", 1.0), sim_now=sim_now)
        if clock is not None:
            for row in report.pods:
                row["created"] = clock.real(row["created"])
        events = []
        for row in report.pods[:PODS_WITH_EVENTS]:
            events += [_event_row(e, row["name"]) for e in backend.pod_events(namespace, row["name"])]
        if clock is not None:
            for event in events:
                event["at"] = clock.real(event["at"])
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
                if clock is not None:
                    report.log = clock.log(report.log)
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


# ---------------------------------------------------------------------------------------------------
# Huawei: where huawei.com/AscendReal says a job's pods run (read only; the read-back decides)
# ---------------------------------------------------------------------------------------------------


def _live(pod: dict) -> bool:
    status = pod.get("status") or {}
    return not pod["metadata"].get("deletionTimestamp") and status.get("phase") in ("Pending", "Running")


def ascend_placements(
    pods: Iterable[dict], cluster: Any, *, seen: float
) -> tuple[dict[int, set[tuple[str, str]]], dict[int, float], list[str]]:
    """What ``huawei.com/AscendReal`` says about where Suanchi's pods run, in the shape the read-back
    takes (``apps.telemetry.readback.readback``): ledger device → {(namespace, pod)}, every Huawei
    device of a node whose pods were read → ``seen`` (a timestamp), and the problems found.

    Only a job's pods on a node that all carry the annotation count (one without it has not been
    given its chips yet, so its allocations are neither confirmed nor stray); an entry that does not
    parse or names a chip the ledger does not have is reported and that job's pods on the node left out."""
    from apps.inventory.models import Device

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if LABEL_JOB in labels and node and _live(pod):
            groups[(labels[LABEL_JOB], node)].append(pod)
    problems: list[str] = []
    readable: list[list[tuple[str, dict, list[int]]]] = []  # per (job, node): every pod's chips
    for (_job, node), group in sorted(groups.items()):
        values = [(pod["metadata"].get("annotations") or {}).get(ASCEND_REAL_ANNOTATION) for pod in group]
        if not all(values):
            continue
        parsed = []
        for pod, value in zip(group, values, strict=True):
            try:
                parsed.append((node, pod, ascend_real_chips(value)))
            except ParseFailed as e:
                problems.append(f"{pod['metadata']['name']}: {e.message}")
        if len(parsed) == len(group):
            readable.append(parsed)
    if not readable:
        return {}, {}, problems
    devices = {
        (d.node.name, d.index): d.pk
        for d in Device.objects.filter(
            node__cluster=cluster, node__name__in={p[0] for g in readable for p in g}, vendor="huawei"
        ).select_related("node")
    }
    pods_by_device: dict[int, set[tuple[str, str]]] = defaultdict(set)
    seen_at = {pk: seen for pk in devices.values()}
    for group in readable:
        unknown = [(pod, [c for c in chips if (node, c) not in devices]) for node, pod, chips in group]
        unknown = [(pod, missing) for pod, missing in unknown if missing]
        for pod, missing in unknown:
            problems.append(
                _("%(pod)s: %(annotation)s names chips %(chips)s that %(node)s does not have in the ledger")
                % {
                    "pod": pod["metadata"]["name"],
                    "annotation": ASCEND_REAL_ANNOTATION,
                    "chips": ", ".join(map(str, missing)),
                    "node": group[0][0],
                }
            )
        if unknown:
            continue  # the group's chips are not all known: nothing is concluded for its job there
        for node, pod, chips in group:
            meta = pod["metadata"]
            for chip in chips:
                pods_by_device[devices[(node, chip)]].add((meta.get("namespace", ""), meta["name"]))
    return dict(pods_by_device), seen_at, problems
