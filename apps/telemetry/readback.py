"""Read back the card the cluster chose (issue 18 item 3).

In the plain / MIG / vNPU device-plugin modes the pod asks for a count and the device plugin picks
the cards, so the card in a pod's trace and the card it runs on can differ. Exporters that join GPU
metrics with the kubelet's pod-resources API label each device's series with the pod that holds it:

- NVIDIA dcgm-exporter: ``pod``, ``namespace``, ``container`` next to ``gpu`` / ``UUID`` with
  ``DCGM_EXPORTER_KUBERNETES=true`` (``internal/pkg/transformation/const.go``; "Enabling DCGM
  Exporter with Kubernetes", https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/
  dcgm-exporter.html);
- Huawei npu-exporter: ``namespace``, ``pod_name`` on every chip metric since the MindCluster
  refactor (``component/npu-exporter``, docs/en/scheduling/api/npu_exporter/01_prometheus_metrics_api.md);
- AMD device-metrics-exporter: ``pod``, ``namespace``, ``container`` always present
  (https://instinct.docs.amd.com/projects/device-metrics-exporter/en/latest/);
- Hygon dcu-exporter (``dcu_pod_name`` / ``dcu_pod_namespace`` on ``dcu_containers``) and Cambricon
  mlu-exporter (``pod`` / ``namespace`` on ``mlu_container``);
- Hygon hcu-exporter (``hcu_pod_name`` / ``hcu_pod_namespace`` on every card and vHCU series), Iluvatar
  ix-exporter (``pod`` / ``namespace``), MetaX mx-exporter (``exported_pod`` / ``exported_namespace``)
  and Enflame gcu-exporter (``pod_name`` / ``pod_namespace``), each from the exporter's own source as
  cited in ``metric_maps`` (issue 28);

see ``../shared/reference/hardware-telemetry.md`` §1.1-1.6 and ``metric_maps``. Suanchi's pods are
named after their workload, ``suanchi-<job id>`` or ``suanchi-<job id>-a<attempt>`` plus the
controller's suffixes (``apps.clusters.manifests.workload_name``), in the project's namespace.

For every job whose pod shows up on a card, the cards it runs on are compared with its active
allocations on that node: an allocated card that was scraped without the pod is paired with a card
that shows the pod but is not the job's. The allocation moves to the real card when that card has room
(``apps.scheduling.allocations.allocation_move``, the same capacity rules as a placement); otherwise a
conflict is raised — a double booking the ledger shows on both cards and on the job. Re-reading the
same window finds the ledger already matching (after a move) or the conflict already recorded, so it
moves nothing twice and raises nothing twice.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from apps.core.stored_text import stored
from apps.core.templatetags.suanchi import DEVICE_KIND_BY_VENDOR
from apps.inventory.models import Device, DeviceEvent
from apps.inventory.services.ledger.events import device_events_create
from apps.jobs.events import record_job_events
from apps.jobs.models import Allocation, Job, JobEvent

# ``suanchi-<job>`` optionally followed by ``-a<attempt>`` and the controllers' suffixes.
POD_NAME = re.compile(r"^suanchi-(\d+)(?:-a(\d+))?(?:-|$)")

# Stored untranslated with their parameters (``data["msgid"]`` / ``["params"]``); shown translated.
MOVED_MESSAGE = stored(
    "Device plugin chose %(actual)s, not %(allocated)s, on %(node)s for job %(job)s: "
    "the allocation moved to the card the pod runs on."
)
CONFLICT_MESSAGE = stored(
    "Double booking: device plugin chose %(actual)s, not %(allocated)s, on %(node)s for job %(job)s, "
    "but %(actual)s is allocated to job %(holders)s."
)


@dataclass
class Readback:
    moved: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0


def pod_job(namespace: str | None, pod: str | None) -> tuple[int, int | None] | None:
    """(job id, attempt or None) of a Suanchi pod name, else None."""
    match = POD_NAME.match(pod or "")
    if not match:
        return None
    return int(match.group(1)), (int(match.group(2)) if match.group(2) is not None else None)


def _card(vendor: str, index: int) -> str:
    """GPU5 / NPU3 / DCU1 / MLU2, as the vendor tools print a card."""
    return f"{DEVICE_KIND_BY_VENDOR.get(vendor, 'GPU')}{index}"


def _namespaces(project_namespace: str, project_slug: str) -> set[str]:
    from apps.clusters.manifests import dns_label

    return {project_namespace, project_slug, dns_label(project_namespace or project_slug)} - {""}


def readback(
    *, pods_by_device: dict[int, set[tuple[str, str]]], seen_at: dict[int, float], actor_label: str
) -> Readback:
    """Compare where pods run (``pods_by_device``: ledger device → (namespace, pod) seen on it in the
    batch; ``seen_at``: every device scraped in the batch → its latest sample time) with their jobs'
    allocations; move or flag. Runs inside the ingest's transaction."""
    from apps.scheduling.allocations import allocation_move

    out = Readback()
    wanted: dict[int, list[tuple[str, int | None, int]]] = defaultdict(list)
    for device_id, pods in pods_by_device.items():
        for namespace, pod in pods:
            hit = pod_job(namespace, pod)
            if hit:
                wanted[hit[0]].append((namespace, hit[1], device_id))
    if not wanted:
        return out
    jobs = {
        j["pk"]: j
        for j in Job.objects.filter(pk__in=wanted).values(
            "pk", "attempt", "project__namespace", "project__slug"
        )
    }
    # job → devices its current pods run on.
    running: dict[int, set[int]] = defaultdict(set)
    for job_id, seen in wanted.items():
        job = jobs.get(job_id)
        if job is None:
            continue
        spaces = _namespaces(job["project__namespace"], job["project__slug"])
        for namespace, attempt, device_id in seen:
            # A pod of an earlier attempt (still terminating) says nothing about this attempt's cards.
            if namespace in spaces and (attempt is None or attempt == job["attempt"]):
                running[job_id].add(device_id)
    if not running:
        return out
    allocs = list(
        Allocation.objects.filter(job_id__in=running, released_at__isnull=True)
        .order_by("pk")
        .values("pk", "job_id", "device_id", "node_id", "started_at")
    )
    devices = {
        d["pk"]: d
        for d in Device.objects.filter(
            pk__in={a["device_id"] for a in allocs} | {d for ds in running.values() for d in ds}
        ).values("pk", "node_id", "node__name", "vendor", "index")
    }
    pairs: list[tuple[dict, int]] = []
    for job_id, real in running.items():
        mine = [a for a in allocs if a["job_id"] == job_id]
        held = {a["device_id"] for a in mine}
        for node_id in sorted({devices[d]["node_id"] for d in real if d in devices}):
            # An allocated card scraped in this batch without the pod, not merely absent from it.
            stray = [
                a
                for a in mine
                if a["node_id"] == node_id
                and a["device_id"] not in real
                and a["device_id"] in seen_at
                and a["started_at"].timestamp() <= seen_at[a["device_id"]]
            ]
            extra = sorted(
                d for d in real if d not in held and d in devices and devices[d]["node_id"] == node_id
            )
            pairs.extend(zip(stray, extra, strict=False))
    # Moves can free a card another pair needs: retry the refused ones while any move succeeds.
    pending = pairs
    refused: list[tuple[dict, int, list[int]]] = []
    while pending:
        refused, progress = [], False
        for alloc, real_id in pending:
            moved, holders = allocation_move(allocation_id=alloc["pk"], device_id=real_id)
            if moved is not None:
                progress = True
                _moved(out, alloc, devices[alloc["device_id"]], devices[real_id], actor_label)
            elif holders:
                refused.append((alloc, real_id, holders))
        pending = [(a, d) for a, d, _ in refused] if progress else []
    for alloc, real_id, holders in refused:
        _conflict(out, alloc, devices[alloc["device_id"]], devices[real_id], holders, actor_label)
    return out


def _params(alloc: dict, old: dict, new: dict) -> dict[str, Any]:
    return {
        "actual": _card(new["vendor"], new["index"]),
        "allocated": _card(old["vendor"], old["index"]),
        "node": new["node__name"],
        "job": alloc["job_id"],
    }


def _moved(out: Readback, alloc: dict, old: dict, new: dict, actor_label: str) -> None:
    params = _params(alloc, old, new)
    message = MOVED_MESSAGE % params
    detail = {
        "allocation": alloc["pk"],
        "job": alloc["job_id"],
        "from_device": old["pk"],
        "to_device": new["pk"],
    }
    data = {"readback": "moved", **detail, "msgid": MOVED_MESSAGE, "params": params}
    record_job_events(
        [
            JobEvent(
                job_id=alloc["job_id"],
                kind=JobEvent.Kind.DECISION,
                message=message[:1000],
                actor_label=actor_label,
                data=data,
            )
        ]
    )
    device_events_create(
        [
            DeviceEvent(
                node_id=card["node_id"],
                device_id=card["pk"],
                kind=DeviceEvent.Kind.UPDATED,
                severity=DeviceEvent.Severity.WARNING,
                message=message[:500],
                before={"allocation": alloc["pk"], "device": old["pk"]},
                after={"readback": data},
                actor_label=actor_label,
            )
            for card in (old, new)
        ]
    )
    out.moved.append(detail)
    out.events += 3


def _conflict(out: Readback, alloc: dict, old: dict, new: dict, holders: list[int], actor_label: str) -> None:
    # Raised once per allocation and real card: the same window read again adds nothing.
    if DeviceEvent.objects.filter(
        device_id=new["pk"],
        kind=DeviceEvent.Kind.CONFLICT,
        after__readback__allocation=alloc["pk"],
    ).exists():
        return
    params = {**_params(alloc, old, new), "holders": ", ".join(map(str, holders))}
    message = CONFLICT_MESSAGE % params
    detail = {
        "allocation": alloc["pk"],
        "job": alloc["job_id"],
        "allocated_device": old["pk"],
        "real_device": new["pk"],
        "holders": holders,
    }
    data = {"readback": "conflict", **detail, "msgid": CONFLICT_MESSAGE, "params": params}
    record_job_events(
        [
            JobEvent(
                job_id=job_id,
                kind=JobEvent.Kind.DECISION,
                message=message[:1000],
                actor_label=actor_label,
                data=data,
            )
            for job_id in [alloc["job_id"], *holders]
        ]
    )
    device_events_create(
        [
            DeviceEvent(
                node_id=card["node_id"],
                device_id=card["pk"],
                kind=DeviceEvent.Kind.CONFLICT,
                severity=DeviceEvent.Severity.CRITICAL,
                message=message[:500],
                after={"readback": data},
                actor_label=actor_label,
            )
            for card in (new, old)
        ]
    )
    out.conflicts.append(detail)
    out.events += 3 + len(holders)
