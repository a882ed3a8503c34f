"""The pod template of one pod's worth of allocations on one node: resources, env (rendezvous,
checkpoints), host mounts, tolerations, node pinning, DRA claim."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apps.clusters import sharing
from apps.clusters.manifests.dra import ANN_DRA_FALLBACK
from apps.clusters.manifests.names import (
    ANN_EXPECTED_DURATION,
    ANN_PLACEMENT,
    ANN_TRACE,
    ANN_UUIDS,
    HOSTNAME_LABEL,
    LABEL_ATTEMPT,
    common_labels,
    dns_label,
    project_namespace,
)
from apps.clusters.manifests.resources import device_ref, replica_resources
from apps.inventory.vendors import ADAPTERS

# Variables a device plugin / container toolkit owns: never set by Suanchi, dropped from a job's env.
# The NVIDIA device plugin sets NVIDIA_VISIBLE_DEVICES to the cards it allocated and overwrites a
# pod's own value (NVIDIA/nvidia-container-toolkit#27); where the toolkit honours the variable from
# an unprivileged pod, a pod-set value reaches cards it was not allocated
# (bottlerocket-os/bottlerocket#3718). The other vendors' plugins set theirs the same way.
DEVICE_PLUGIN_ENV = frozenset(
    {adapter.visible_devices_env for adapter in ADAPTERS.values()}
    | {
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "ASCEND_VISIBLE_DEVICES",
        "ASCEND_RT_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "MLU_VISIBLE_DEVICES",
    }
)

# Rendezvous of a multi-replica batch job (the variables Kubeflow's PyTorchJob sets per pod:
# MASTER_ADDR, MASTER_PORT, WORLD_SIZE = number of pods, RANK = pod index; NODE_RANK as PyTorch
# Lightning reads it). 29500 is torch.distributed's default port.
MASTER_PORT = 29500
LABEL_REPLICA = "suanchi.io/replica"
# Ascend collective communication: HCCL Controller / Ascend Operator write the job's rank table into
# the ConfigMap ``rings-config-<job>`` mounted at /user/serverid/devindex/config (hccl.json) —
# hiascend.com MindX DL "hccl.json File Description" (mxdlug_appendices_009).
RANK_TABLE_DIR = "/user/serverid/devindex/config"
RANK_TABLE_FILE = f"{RANK_TABLE_DIR}/hccl.json"


def _tolerations(job: Any, vendors: Iterable[str]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(item: dict[str, Any]) -> None:
        key = json.dumps(item, sort_keys=True)
        if key not in seen:
            seen.add(key)
            result.append(item)

    for vendor in sorted(vendors):
        adapter = ADAPTERS.get(vendor)
        for taint in adapter.taints() if adapter else []:
            add(
                {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint["effect"]}
            )
    if getattr(job, "gray_opt_in", False):  # the gray-release pool's taint
        add({"key": "suanchi.io/gray", "operator": "Exists"})
    allowed = ("key", "operator", "value", "effect", "tolerationSeconds")
    for toleration in job.tolerations or []:
        if isinstance(toleration, Mapping):
            item = {k: toleration[k] for k in allowed if toleration.get(k) not in (None, "")}
            if item:
                add(item)
    return result


@dataclass
class Gang:
    """One replica of a multi-replica batch job: its rank and the rendezvous service."""

    rank: int
    world_size: int
    node_rank: int
    service: str
    rank_table: str = ""  # the ConfigMap holding the Ascend rank table, when the job asks for one


def pod_template(
    job: Any,
    allocations: Sequence[Any],
    cluster: Any,
    *,
    attempt: int | None,
    checkpoint: str | None,
    restart_policy: str,
    claim: dict[str, str] | None = None,
    gang: Gang | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The pod template (for pods on exactly one node) and the object-level annotations.

    ``claim``: the pod's entry in ``spec.resourceClaims`` (``resourceClaimName`` or
    ``resourceClaimTemplateName``) when some of its devices come through DRA.
    """
    allocations = sorted(allocations, key=lambda a: (a.replica, a.node.name, a.device.index))
    replicas: dict[int, list[Any]] = defaultdict(list)
    for allocation in allocations:
        replicas[allocation.replica].append(allocation)
    if not replicas:
        raise ValueError(f"job {job.pk} has no allocations to render")
    nodes = sorted({a.node.name for a in allocations})
    if len(nodes) != 1:  # workload_objects splits per node; a template never spans nodes
        raise ValueError(f"job {job.pk}: one pod template cannot be pinned to {len(nodes)} nodes")

    limits, hami, notes = _pod_limits(replicas, cluster)
    vendors = sorted({a.device.vendor for a in allocations})
    trace = next((str(a.trace_id) for a in allocations if a.trace_id), "")
    annotations, pod_annotations = _annotations(job, allocations, replicas, trace, notes, hami)
    env = _env(job, attempt=attempt, checkpoint=checkpoint, trace=trace, gang=gang)
    volumes, mounts = _volumes(vendors, gang)

    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = {k: str(v) for k, v in sorted(limits.items())}
    if claim is not None:
        resources["claims"] = [{"name": claim["name"]}]
    container: dict[str, Any] = {
        "name": dns_label(job.name, fallback="main"),
        "image": job.image,
        "env": env,
        "resources": resources,
    }
    if job.command:
        container["command"] = [str(c) for c in job.command]
    if mounts:
        container["volumeMounts"] = mounts

    # Pinned with a nodeSelector on the hostname label, not ``spec.nodeName``: the pod still goes
    # through the scheduler, which accounts the device plugin's resources and allocates DRA claims —
    # a pod created with nodeName bypasses it, and its unallocated claims make the kubelet refuse it
    # (Kubernetes docs "Dynamic Resource Allocation" → "Pre-scheduled Pods").
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "containers": [container],
        "nodeSelector": {HOSTNAME_LABEL: nodes[0]},
    }
    if gang is not None:
        spec["hostname"] = f"r{gang.rank}"
        spec["subdomain"] = gang.service
    if claim is not None:
        spec["resourceClaims"] = [claim]
    tolerations = _tolerations(job, vendors)
    if tolerations:
        spec["tolerations"] = tolerations
    if volumes:
        spec["volumes"] = volumes

    labels = common_labels(job)
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    if gang is not None:
        labels[LABEL_REPLICA] = str(gang.rank)
    template = {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": spec}
    return template, annotations


def _pod_limits(replicas: dict[int, list[Any]], cluster: Any) -> tuple[dict[str, int], set[str], list[str]]:
    """The per-pod extended resources (the largest per-replica request), the vendors HAMi pins by UUID,
    the DRA fallback notes."""
    limits: dict[str, int] = {}
    hami: set[str] = set()
    notes: list[str] = []
    for allocs in replicas.values():
        replica_limits, replica_hami, replica_notes = replica_resources(allocs, cluster)
        hami |= replica_hami
        notes.extend(n for n in replica_notes if n not in notes)
        for name, amount in replica_limits.items():
            limits[name] = max(limits.get(name, 0), amount)
    return limits, hami, notes


def _annotations(
    job: Any,
    allocations: Sequence[Any],
    replicas: dict[int, list[Any]],
    trace: str,
    notes: list[str],
    hami: set[str],
) -> tuple[dict[str, str], dict[str, str]]:
    """The object's annotations (trace, device ids, placement, DRA fallback, expected duration) and
    the pod's: the same plus HAMi's binding to the cards by UUID."""
    uuids = [device_ref(a) for a in allocations]
    annotations = {ANN_TRACE: trace, ANN_UUIDS: ",".join(uuids)}
    placement = {
        str(r): {"node": allocs[0].node.name, "devices": [device_ref(a) for a in allocs]}
        for r, allocs in sorted(replicas.items())
    }
    annotations[ANN_PLACEMENT] = json.dumps(placement, separators=(",", ":"), sort_keys=True)
    if notes:
        annotations[ANN_DRA_FALLBACK] = "; ".join(notes)
    if getattr(job, "expected_duration_s", None):
        # Informative for people and the simulated cluster (which runs the pod this long).
        annotations[ANN_EXPECTED_DURATION] = str(int(job.expected_duration_s))
    pod_annotations = dict(annotations)
    for vendor in sorted(hami):
        # HAMi binds the pod to these cards by UUID (its scheduler extender reads the annotation).
        share = sharing.HAMI_SHARES[vendor]
        pod_annotations[share.uuid_annotation] = ",".join(
            sharing.hami_device_ids(share, [a for a in allocations if a.device.vendor == vendor])
        )
    return annotations, pod_annotations


def _env(
    job: Any, *, attempt: int | None, checkpoint: str | None, trace: str, gang: Gang | None
) -> list[dict[str, str]]:
    """The container's env: the job's (less the device plugin's variables), then Suanchi's: job id,
    attempt, trace, a gang's rendezvous, checkpoint directory and where to resume from."""
    env: list[dict[str, str]] = [
        {"name": str(k), "value": str(v)}
        for k, v in sorted((job.env or {}).items())
        if str(k) not in DEVICE_PLUGIN_ENV  # the device plugin's, never the pod's (see above)
    ]
    names = {e["name"] for e in env}

    def set_env(name: str, value: str) -> None:
        if name in names:
            env[:] = [e for e in env if e["name"] != name]
        names.add(name)
        env.append({"name": name, "value": value})

    set_env("SUANCHI_JOB_ID", str(job.pk))
    if attempt is not None:
        set_env("SUANCHI_ATTEMPT", str(attempt))
    if trace:
        set_env("SUANCHI_TRACE_ID", trace)
    if gang is not None:
        namespace = project_namespace(job.project)
        # Replica 0's stable name: <hostname>.<subdomain>.<namespace>.svc (Kubernetes docs "DNS for
        # Services and Pods" → "Pod's hostname and subdomain fields", with a headless Service named
        # like the subdomain).
        set_env("MASTER_ADDR", f"r0.{gang.service}.{namespace}.svc")
        set_env("MASTER_PORT", str(MASTER_PORT))
        set_env("WORLD_SIZE", str(gang.world_size))
        set_env("RANK", str(gang.rank))
        set_env("NODE_RANK", str(gang.node_rank))
        if gang.rank_table:
            set_env("RANK_TABLE_FILE", RANK_TABLE_FILE)
    if job.checkpoint_dir:
        set_env("SUANCHI_CHECKPOINT_DIR", job.checkpoint_dir)
    # A retried or preempted attempt resumes from the checkpoint recorded when the last one ended.
    resume = checkpoint or getattr(job, "resume_from", "") or (job.checkpoint_dir if attempt else None)
    if resume:
        set_env("SUANCHI_RESUME_FROM", resume)
    return env


def _volumes(vendors: Sequence[str], gang: Gang | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The vendors' host paths (their adapters' mounts) and a gang's rank-table ConfigMap: the pod's
    volumes and the container's mounts."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for vendor in vendors:
        adapter = ADAPTERS.get(vendor)
        for mount in adapter.mounts() if adapter else []:
            name = dns_label(mount["name"])
            if any(v["name"] == name for v in volumes):
                continue
            volumes.append({"name": name, "hostPath": {"path": mount["hostPath"], "type": "Directory"}})
            mounts.append(
                {"name": name, "mountPath": mount["mountPath"], "readOnly": bool(mount.get("readOnly", True))}
            )
    if gang is not None and gang.rank_table:
        volumes.append({"name": "rank-table", "configMap": {"name": gang.rank_table}})
        mounts.append({"name": "rank-table", "mountPath": RANK_TABLE_DIR, "readOnly": True})
    return volumes, mounts
