"""Every object of one attempt of a job, in apply order: the workloads (batch/v1 Jobs, apps/v1
Deployments), a gang's rendezvous Service, an Ascend rank-table ConfigMap, the DRA claims."""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from apps.clusters.deployment_names import deployment_names
from apps.clusters.manifests.dra import POD_CLAIM_NAME, claim_manifest
from apps.clusters.manifests.names import (
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_WORKLOAD,
    MANAGED_BY,
    MANAGED_BY_KEY,
    common_labels,
    dns_label,
    project_namespace,
    workload_name,
)
from apps.clusters.manifests.pod import LABEL_REPLICA, MASTER_PORT, Gang, pod_template

WORKLOAD_KINDS = ("Job", "Deployment")


def _batch_job(
    job: Any, name: str, template: dict, annotations: dict, attempt: int, replica: int | None
) -> dict[str, Any]:
    """batch/v1 Job of one pod. ``backoffLimit: 0``: retries are Suanchi's."""
    labels = common_labels(job)
    labels[LABEL_ATTEMPT] = str(attempt)
    if replica is not None:
        labels[LABEL_REPLICA] = str(replica)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": project_namespace(job.project),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"backoffLimit": 0, "parallelism": 1, "completions": 1, "template": template},
    }


def _attempt_metadata(job: Any, name: str, attempt: int) -> dict[str, Any]:
    """``metadata`` of an object of one attempt of ``job``: its name, the project's namespace, the
    job's labels and the attempt's."""
    labels = common_labels(job)
    labels[LABEL_ATTEMPT] = str(attempt)
    return {"name": name, "namespace": project_namespace(job.project), "labels": labels}


def _rendezvous_service(job: Any, name: str, attempt: int) -> dict[str, Any]:
    """The headless Service that gives each replica's pod a DNS name (``r<rank>.<name>``). Not-ready
    addresses are published: ranks rendezvous before any readiness (Kubernetes docs "Service" →
    "Headless Services", ``publishNotReadyAddresses``)."""
    meta = _attempt_metadata(job, name, attempt)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: meta["labels"][LABEL_JOB], LABEL_ATTEMPT: str(attempt)},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def _rank_table_configmap(job: Any, name: str, attempt: int) -> dict[str, Any]:
    """The ConfigMap HCCL Controller fills with the job's rank table (created "initializing")."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _attempt_metadata(job, name, attempt),
        "data": {"hccl.json": json.dumps({"status": "initializing"})},
    }


def claim_ref(claim: dict | None) -> dict[str, str] | None:
    if claim is None:
        return None
    key = "resourceClaimTemplateName" if claim["kind"] == "ResourceClaimTemplate" else "resourceClaimName"
    return {"name": POD_CLAIM_NAME, key: claim["metadata"]["name"]}


def workload_objects(
    job: Any,
    allocations: Sequence[Any],
    cluster: Any,
    *,
    attempt: int,
    checkpoint: str | None = None,
    keep_names: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every object of one attempt of ``job``, in apply order (the outbox applies and deletes them
    as one group): the Ascend rank-table ConfigMap, DRA ResourceClaims / ResourceClaimTemplates, the
    rendezvous Service, then the workloads. No pod template can land on more than one node:

    * batch work, one replica: one batch/v1 Job (``suanchi-<id>-a<attempt>``);
    * batch work, several replicas (a gang, on one node or several): one Job per replica
      (``…-r<rank>``), each pinned to its replica's node, with its own ResourceClaim in DRA mode, a
      headless Service for the rendezvous and MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK /
      NODE_RANK; ``RANK_TABLE_FILE`` and its ConfigMap mount when an Ascend job's env asks for it;
    * inference: one apps/v1 Deployment (``suanchi-<id>``) when its replicas share a node, else one
      per node (``suanchi-<id>-n<k>``, replicas = those placed there), each with a
      ResourceClaimTemplate in DRA mode; ``keep_names`` keeps the names a re-render of the same
      attempt already used (``deployment_names``).
    """
    allocations = sorted(allocations, key=lambda a: (a.replica, a.node.name, a.device.index))
    if not allocations:
        raise ValueError(f"job {job.pk} has no allocations to render")
    replicas: dict[int, list[Any]] = defaultdict(list)
    for allocation in allocations:
        replicas[allocation.replica].append(allocation)
    nodes = sorted({a.node.name for a in allocations})
    objects: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []

    if job.kind == "inference":
        names = deployment_names(workload_name(job), nodes, keep_names)
        for node in nodes:
            allocs = [a for a in allocations if a.node.name == node]
            units = [[a for a in allocs if a.replica == r] for r in sorted({a.replica for a in allocs})]
            name = names[node]
            claim = claim_manifest(job, f"{name}-devices", units, cluster, attempt=None, template=True)
            if claim is not None:
                objects.append(claim)
            template, annotations = pod_template(
                job,
                allocs,
                cluster,
                attempt=None,
                checkpoint=None,
                restart_policy="Always",
                claim=claim_ref(claim),
            )
            count = int(job.replicas) if name == workload_name(job) else len(units)
            workloads.append(_deployment(job, name, template, annotations, count))
        return objects + workloads

    base = workload_name(job, attempt)
    # One pod per replica and node: a replica whose device groups were placed on several nodes of one
    # switch (seed 000 §3.2's cross-node fallback) runs as one pinned pod per node, like a gang.
    pods: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for allocation in allocations:
        pods[(allocation.replica, allocation.node.name)].append(allocation)
    replicas = dict(enumerate(pods[key] for key in sorted(pods)))
    if len(replicas) == 1:
        (allocs,) = replicas.values()
        template, annotations = _batch_pod(
            job, base, allocs, cluster, objects, attempt=attempt, checkpoint=checkpoint
        )
        return [*objects, _batch_job(job, base, template, annotations, attempt, None)]

    rank_table = ""
    if "RANK_TABLE_FILE" in (job.env or {}) and any(a.device.vendor == "huawei" for a in allocations):
        rank_table = dns_label(f"rings-config-{base}")
        objects.append(_rank_table_configmap(job, rank_table, attempt))
    node_rank = {node: i for i, node in enumerate(nodes)}
    for rank, (_replica, allocs) in enumerate(sorted(replicas.items())):
        name = f"{base}-r{rank}"
        gang = Gang(
            rank=rank,
            world_size=len(replicas),
            node_rank=node_rank[allocs[0].node.name],
            service=base,
            rank_table=rank_table,
        )
        template, annotations = _batch_pod(
            job, name, allocs, cluster, objects, attempt=attempt, checkpoint=checkpoint, gang=gang
        )
        workloads.append(_batch_job(job, name, template, annotations, attempt, rank))
    objects.append(_rendezvous_service(job, base, attempt))
    return objects + workloads


def _batch_pod(
    job: Any,
    name: str,
    allocs: Sequence[Any],
    cluster: Any,
    objects: list[dict[str, Any]],
    *,
    attempt: int,
    checkpoint: str | None,
    gang: Gang | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The pod template and annotations of the batch Job ``name``; its DRA ResourceClaim, if any,
    is added to ``objects``."""
    claim = claim_manifest(job, f"{name}-devices", [allocs], cluster, attempt=attempt, template=False)
    if claim is not None:
        objects.append(claim)
    return pod_template(
        job,
        allocs,
        cluster,
        attempt=attempt,
        checkpoint=checkpoint,
        restart_policy="Never",
        claim=claim_ref(claim),
        gang=gang,
    )


def _deployment(job: Any, name: str, template: dict, annotations: dict, replicas: int) -> dict[str, Any]:
    labels = common_labels(job)
    selector = {LABEL_JOB: labels[LABEL_JOB], MANAGED_BY_KEY: MANAGED_BY}
    if name != workload_name(job):  # one Deployment per node: each selects only its own pods
        template["metadata"]["labels"][LABEL_WORKLOAD] = name
        selector[LABEL_WORKLOAD] = name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": project_namespace(job.project),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": selector},
            # Devices are exclusive: a surge pod could not get its cards, so replace in place.
            "strategy": {"type": "Recreate"},
            "template": template,
        },
    }


def workload_manifests(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> list[dict[str, Any]]:
    """The workloads (batch/v1 Jobs or apps/v1 Deployments) among ``workload_objects``."""
    objects = workload_objects(job, allocations, cluster, attempt=attempt, checkpoint=checkpoint)
    return [o for o in objects if o["kind"] in WORKLOAD_KINDS]


def job_manifest(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> dict[str, Any]:
    """The (first) batch/v1 Job of a batch job's attempt — the only one for a single replica."""
    batch = job if job.kind != "inference" else _as_batch(job)
    return workload_manifests(batch, allocations, cluster, attempt=attempt, checkpoint=checkpoint)[0]


def deployment_manifest(job: Any, allocations: Sequence[Any], cluster: Any) -> dict[str, Any]:
    """The (first) apps/v1 Deployment of an inference service."""
    return workload_manifests(_as_inference(job), allocations, cluster, attempt=0)[0]


def workload_manifest(
    job: Any, allocations: Sequence[Any], cluster: Any, *, attempt: int, checkpoint: str | None = None
) -> dict[str, Any]:
    """The first workload of ``workload_objects`` (Deployment for inference, batch/v1 Job else)."""
    return workload_manifests(job, allocations, cluster, attempt=attempt, checkpoint=checkpoint)[0]


def _as_batch(job: Any) -> Any:
    clone = copy.copy(job)
    clone.kind = "training"
    return clone


def _as_inference(job: Any) -> Any:
    if job.kind == "inference":
        return job
    clone = copy.copy(job)
    clone.kind = "inference"
    return clone
