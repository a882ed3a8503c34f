"""Kubernetes manifests for what Suanchi decides: pure functions from loaded model instances to dicts.

Nothing here queries the database: pass instances (saved or not) whose related objects are already
loaded (``allocation.device``, ``allocation.node``, ``job.project``). Every function returns a plain
dict ready for ``yaml.safe_dump`` or the ``kubernetes`` client, and every rendered object passes
``kubernetes-validate --strict`` (see tests/kube).

Choices worth knowing:

* **Node binding** uses ``nodeSelector: {kubernetes.io/hostname: <node>}`` rather than ``nodeName``:
  the pod still goes through the scheduler (and HAMi / Volcano extenders), so the device plugin's
  extended resources are accounted and taints are honoured. It assumes ``Node.name`` equals the
  node's hostname label, which holds for kubeadm-style clusters.
* **Cross-node replicas**: one pod template cannot pin each replica to a different node. When the
  allocations span several nodes the pods get a required ``nodeAffinity`` ``In [nodes]`` and the
  ``suanchi.io/cross-node`` annotation; the per-replica placement is kept in the
  ``suanchi.io/placement`` annotation. The scheduler may then put two replicas on one of those
  nodes (or a replica on a node whose devices differ from the ledger's choice) — a known limitation
  until per-replica objects or DRA claims replace it. The visible-devices variable is only set when
  every replica uses the same device indices (otherwise the device plugin's own assignment rules).
* **Per-pod resources** are the largest per-replica request (replicas normally ask for the same).
* **Device-plugin modes** (``Cluster.plugin_mode(vendor)``):
  ``plain`` / ``mig-single`` / ``dra`` → the vendor's whole-device resource count (DRA claims are
  not rendered yet; the plain count is the fallback); ``mig-mixed`` → ``nvidia.com/mig-<profile>``
  per allocation with a partition profile; ``hami`` (NVIDIA) → ``nvidia.com/gpu`` count +
  ``nvidia.com/gpumem`` (MiB per card) + ``nvidia.com/gpucores`` (percent per card) and the
  ``nvidia.com/use-gpuuuid`` annotation; ``ascend-vnpu`` (Huawei) → ``huawei.com/Ascend910-<template>``
  from the profile name (see ``vnpu_resource_name``). A mode that does not apply to a vendor
  (e.g. ``hami`` on Huawei) renders as plain.
* **Checkpoints**: ``SUANCHI_CHECKPOINT_DIR`` is the job's checkpoint directory; ``SUANCHI_RESUME_FROM``
  is the ``checkpoint`` argument, or — on a retry (attempt > 0) without one — the directory itself
  (the workload resumes from the newest checkpoint it finds there).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from apps.inventory.vendors import ADAPTERS

MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "suanchi"
LABEL_JOB = "suanchi.io/job"
LABEL_PROJECT = "suanchi.io/project"
LABEL_ATTEMPT = "suanchi.io/attempt"
ANN_TRACE = "suanchi.io/trace-id"
ANN_UUIDS = "suanchi.io/device-uuids"
ANN_CROSS_NODE = "suanchi.io/cross-node"
ANN_PLACEMENT = "suanchi.io/placement"
ANN_EXPECTED_DURATION = "suanchi.io/expected-duration-seconds"
HAMI_UUID_ANNOTATION = "nvidia.com/use-gpuuuid"
QUOTA_NAME = "suanchi-quota"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Object kinds Suanchi applies, with their apiVersion (used by render_manifests and the tests).
API_VERSIONS = {
    "Namespace": "v1",
    "ResourceQuota": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "Node": "v1",
}

# ---------------------------------------------------------------------------------------------------
# Names and label values
# ---------------------------------------------------------------------------------------------------

_DNS_INVALID = re.compile(r"[^a-z0-9-]+")
_LABEL_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_KEY_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


def dns_label(text: object, *, max_length: int = 63, fallback: str = "x") -> str:
    """A DNS-1123 label: lowercase [a-z0-9-], alphanumeric at both ends, at most ``max_length``."""
    value = _DNS_INVALID.sub("-", str(text).lower())
    value = re.sub(r"-{2,}", "-", value)[:max_length].strip("-")
    return value or fallback


def label_value(text: object) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends ("" allowed)."""
    value = _LABEL_INVALID.sub("-", str(text))
    value = value[:63]
    return value.strip("-._")


def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_KEY_NAME.match(name))


def workload_name(job: Any, attempt: int | None = None) -> str:
    """``suanchi-<job id>`` (Deployment) or ``suanchi-<job id>-a<attempt>`` (batch Job)."""
    base = f"suanchi-{dns_label(job.pk, max_length=40)}"
    return base if attempt is None else f"{base}-a{int(attempt)}"


def _namespace(project: Any) -> str:
    return dns_label(project.namespace or project.slug)


def _common_labels(job: Any) -> dict[str, str]:
    return {
        MANAGED_BY_KEY: MANAGED_BY,
        LABEL_JOB: label_value(job.pk),
        LABEL_PROJECT: label_value(job.project.slug),
    }


# ---------------------------------------------------------------------------------------------------
# Namespace, quota, node patch
# ---------------------------------------------------------------------------------------------------


def namespace_manifest(project: Any) -> dict[str, Any]:
    """v1 Namespace for a project, labelled as Suanchi's."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": _namespace(project),
            "labels": {MANAGED_BY_KEY: MANAGED_BY, LABEL_PROJECT: label_value(project.slug)},
        },
    }


_STANDARD_QUOTA_KEYS = re.compile(r"^(requests\.|limits\.|count/)|^(pods|services|cpu|memory|configmaps)$")


def resource_quota_manifest(project: Any, hard: Mapping[str, Any]) -> dict[str, Any]:
    """v1 ResourceQuota (seed 004 §5): each vendor resource becomes ``requests.<r>`` only.

    Kubernetes counts an extended resource against a quota only as ``requests.<name>`` (docs
    "Resource Quotas" → "Resource quota for extended resources": overcommit is not allowed for
    them, so only the ``requests.`` prefix is meaningful; pkg/quota/v1/evaluator/core/pods.go never
    counts ``limits.<extended>``, a ``limits.`` entry would never be enforced).
    ``hard`` maps resource names (``nvidia.com/gpu``) to counts; keys already qualified
    (``requests.cpu``, ``count/jobs.batch``, ``pods``) are kept as given.
    """
    spec: dict[str, str] = {}
    for resource, amount in sorted(hard.items()):
        value = str(amount)
        if _STANDARD_QUOTA_KEYS.match(resource):
            spec[resource] = value
        else:
            spec[f"requests.{resource}"] = value
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": _namespace(project),
            "labels": {MANAGED_BY_KEY: MANAGED_BY, LABEL_PROJECT: label_value(project.slug)},
        },
        "spec": {"hard": spec},
    }


def node_patch(node: Any) -> dict[str, Any]:
    """The body that brings a Node's labels and taints in line with the ledger.

    A full ``v1 Node`` shape (so it validates), meant for a strategic-merge / merge patch: labels are
    merged, ``spec.taints`` replaces the list. Invalid label keys are dropped; values are sanitised.
    """
    labels = {
        str(key): label_value(value)
        for key, value in (node.labels or {}).items()
        if valid_label_key(str(key))
    }
    taints = []
    for taint in node.taints or []:
        key = str(taint.get("key", ""))
        if not valid_label_key(key):
            continue
        item = {"key": key, "effect": taint.get("effect") or "NoSchedule"}
        if taint.get("value"):
            item["value"] = label_value(taint["value"])
        taints.append(item)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {"taints": taints},
    }


# ---------------------------------------------------------------------------------------------------
# Device resources per plugin mode
# ---------------------------------------------------------------------------------------------------

_VNPU_PROFILE = re.compile(r"^vir(?P<cores>\d+)(?:_(?P<cpu>\d+)c)?(?:_(?P<mem>\d+)g)?$")


def vnpu_resource_name(profile: str, base: str = "huawei.com/Ascend910") -> str:
    """Ascend vNPU template → extended resource, following the catalog's ``k8s_resource_names``.

    ``vir02`` → ``huawei.com/Ascend910-2c``; ``vir05_1c_16g`` → ``huawei.com/Ascend910-5c.1cpu.16g``
    (AI cores, AI CPUs, memory in GB). A name that is not a ``vir`` template is appended sanitised.
    """
    match = _VNPU_PROFILE.match(profile.strip().lower())
    if not match:
        return f"{base}-{label_value(profile)}"
    suffix = f"{int(match['cores'])}c"
    if match["cpu"]:
        suffix += f".{int(match['cpu'])}cpu"
    if match["mem"]:
        suffix += f".{int(match['mem'])}g"
    return f"{base}-{suffix}"


def _replica_resources(allocations: Sequence[Any], cluster: Any) -> tuple[dict[str, int], bool]:
    """Extended resources for one replica's allocations; second value: HAMi UUID pinning applies."""
    limits: Counter[str] = Counter()
    hami = False
    by_vendor: dict[str, list[Any]] = defaultdict(list)
    for allocation in allocations:
        by_vendor[allocation.device.vendor].append(allocation)
    for vendor, allocs in by_vendor.items():
        adapter = ADAPTERS.get(vendor)
        resource = adapter.resource_name if adapter else f"{dns_label(vendor)}.com/device"
        mode = cluster.plugin_mode(vendor) if cluster is not None else "plain"
        if mode == "mig-mixed" and vendor == "nvidia":
            for a in allocs:
                if a.partition_profile:
                    limits[f"nvidia.com/mig-{label_value(a.partition_profile)}"] += 1
                else:
                    limits[resource] += 1
        elif mode == "hami" and vendor == "nvidia":
            hami = True
            limits["nvidia.com/gpu"] += len(allocs)
            limits["nvidia.com/gpumem"] = max(limits["nvidia.com/gpumem"], *(a.memory_mib for a in allocs))
            cores = max(max(1, a.compute_milli // 10) for a in allocs)
            limits["nvidia.com/gpucores"] = max(limits["nvidia.com/gpucores"], cores)
        elif mode == "ascend-vnpu" and vendor == "huawei":
            for a in allocs:
                name = vnpu_resource_name(a.partition_profile, resource) if a.partition_profile else resource
                limits[name] += 1
        else:  # plain, mig-single, dra (claims not rendered yet): whole-device count
            limits[resource] += len(allocs)
    return dict(limits), hami


def _device_ref(allocation: Any) -> str:
    device = allocation.device
    return device.uuid or f"{allocation.node.name}/{device.vendor}{device.index}"


# ---------------------------------------------------------------------------------------------------
# Pod template
# ---------------------------------------------------------------------------------------------------


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


def _pod_template(
    job: Any,
    allocations: Sequence[Any],
    cluster: Any,
    *,
    attempt: int | None,
    checkpoint: str | None,
    restart_policy: str,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The pod template and the object-level annotations."""
    allocations = sorted(allocations, key=lambda a: (a.replica, a.node.name, a.device.index))
    replicas: dict[int, list[Any]] = defaultdict(list)
    for allocation in allocations:
        replicas[allocation.replica].append(allocation)
    if not replicas:
        raise ValueError(f"job {job.pk} has no allocations to render")

    limits: dict[str, int] = {}
    hami = False
    for allocs in replicas.values():
        replica_limits, replica_hami = _replica_resources(allocs, cluster)
        hami = hami or replica_hami
        for name, amount in replica_limits.items():
            limits[name] = max(limits.get(name, 0), amount)

    nodes = sorted({a.node.name for a in allocations})
    vendors = sorted({a.device.vendor for a in allocations})
    uuids = [_device_ref(a) for a in allocations]
    trace = next((str(a.trace_id) for a in allocations if a.trace_id), "")

    annotations = {ANN_TRACE: trace, ANN_UUIDS: ",".join(uuids)}
    if len(nodes) > 1:
        annotations[ANN_CROSS_NODE] = (
            f"replicas span {len(nodes)} nodes ({', '.join(nodes)}); bound by nodeAffinity, "
            "per-replica placement in suanchi.io/placement"
        )
    placement = {
        str(r): {"node": allocs[0].node.name, "devices": [_device_ref(a) for a in allocs]}
        for r, allocs in sorted(replicas.items())
    }
    annotations[ANN_PLACEMENT] = json.dumps(placement, separators=(",", ":"), sort_keys=True)
    if getattr(job, "expected_duration_s", None):
        # Informative for people and the simulated cluster (which runs the pod this long).
        annotations[ANN_EXPECTED_DURATION] = str(int(job.expected_duration_s))
    pod_annotations = dict(annotations)
    if hami:
        pod_annotations[HAMI_UUID_ANNOTATION] = ",".join(
            a.device.uuid for a in allocations if a.device.vendor == "nvidia" and a.device.uuid
        )

    env: list[dict[str, str]] = [
        {"name": str(k), "value": str(v)} for k, v in sorted((job.env or {}).items())
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
    index_sets = {
        vendor: {
            tuple(a.device.index for a in allocs if a.device.vendor == vendor) for allocs in replicas.values()
        }
        for vendor in vendors
    }
    for vendor in vendors:
        adapter = ADAPTERS.get(vendor)
        if adapter and len(index_sets[vendor]) == 1:
            (indices,) = index_sets[vendor]
            set_env(adapter.visible_devices_env, ",".join(str(i) for i in indices))
    if job.checkpoint_dir:
        set_env("SUANCHI_CHECKPOINT_DIR", job.checkpoint_dir)
    # A retried or preempted attempt resumes from the checkpoint recorded when the last one ended.
    resume = checkpoint or getattr(job, "resume_from", "") or (job.checkpoint_dir if attempt else None)
    if resume:
        set_env("SUANCHI_RESUME_FROM", resume)

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

    container: dict[str, Any] = {
        "name": dns_label(job.name, fallback="main"),
        "image": job.image,
        "env": env,
        "resources": {"limits": {k: str(v) for k, v in sorted(limits.items())}},
    }
    if job.command:
        container["command"] = [str(c) for c in job.command]
    if mounts:
        container["volumeMounts"] = mounts

    spec: dict[str, Any] = {"restartPolicy": restart_policy, "containers": [container]}
    if len(nodes) == 1:
        spec["nodeSelector"] = {HOSTNAME_LABEL: nodes[0]}
    else:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": nodes}]}
                    ]
                }
            }
        }
    tolerations = _tolerations(job, vendors)
    if tolerations:
        spec["tolerations"] = tolerations
    if volumes:
        spec["volumes"] = volumes

    labels = _common_labels(job)
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    template = {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": spec}
    return template, annotations


# ---------------------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------------------


def job_manifest(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> dict[str, Any]:
    """batch/v1 Job for training / fine-tune / batch work. ``backoffLimit: 0``: retries are Suanchi's.

    One pod per replica (``parallelism = completions = replicas``, Indexed when more than one).
    """
    template, annotations = _pod_template(
        job, allocations, cluster, attempt=attempt, checkpoint=checkpoint, restart_policy="Never"
    )
    replicas = max(1, len({a.replica for a in allocations}))
    labels = _common_labels(job)
    labels[LABEL_ATTEMPT] = str(attempt)
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "parallelism": replicas,
        "completions": replicas,
        "template": template,
    }
    if replicas > 1:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": workload_name(job, attempt),
            "namespace": _namespace(job.project),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def deployment_manifest(job: Any, allocations: Sequence[Any], cluster: Any) -> dict[str, Any]:
    """apps/v1 Deployment for an inference service: ``replicas = job.replicas``.

    Replicas placed on several nodes are bound with a nodeAffinity ``In [nodes]`` (see the module
    docstring for the limitation).
    """
    template, annotations = _pod_template(
        job, allocations, cluster, attempt=None, checkpoint=None, restart_policy="Always"
    )
    labels = _common_labels(job)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": workload_name(job),
            "namespace": _namespace(job.project),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "replicas": int(job.replicas),
            "selector": {"matchLabels": {LABEL_JOB: labels[LABEL_JOB], MANAGED_BY_KEY: MANAGED_BY}},
            # Devices are exclusive: a surge pod could not get its cards, so replace in place.
            "strategy": {"type": "Recreate"},
            "template": template,
        },
    }


def workload_manifest(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> dict[str, Any]:
    """Deployment for inference services, batch/v1 Job for everything else."""
    if job.kind == "inference":
        return deployment_manifest(job, allocations, cluster)
    return job_manifest(job, allocations, cluster, attempt=attempt, checkpoint=checkpoint)
