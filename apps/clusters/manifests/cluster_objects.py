"""The objects of a project and a node: the project's Namespace and ResourceQuota, the patch that
brings a Node's labels and taints in line with the ledger."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from apps.clusters.manifests.names import (
    LABEL_PROJECT,
    MANAGED_BY,
    MANAGED_BY_KEY,
    QUOTA_NAME,
    label_value,
    project_namespace,
    valid_label_key,
)


def namespace_manifest(project: Any) -> dict[str, Any]:
    """v1 Namespace for a project, labelled as Suanchi's."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": project_namespace(project),
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
            "namespace": project_namespace(project),
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
