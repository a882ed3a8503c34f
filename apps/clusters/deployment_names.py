"""The names of an inference service's per-node Deployments, stable across re-renders of one attempt.

An inference service whose replicas sit on several nodes runs as one Deployment per node
(``apps.clusters.manifests.workload_objects``). When the service loses one node's replicas (the node
was quarantined) or gains replicas on a new node (scaled up), the other nodes' Deployments must keep
their names: a renamed Deployment is a new object, and its running pods would be deleted with the
old one.
"""

from __future__ import annotations

from collections.abc import Sequence


def deployment_names(base: str, nodes: Sequence[str], keep: dict[str, str] | None = None) -> dict[str, str]:
    """Node → the name of an inference service's Deployment there: ``base`` on one node, else
    ``<base>-n<k>``. ``keep`` (node → the name its Deployment already has in this attempt) keeps a
    node's name when its replicas stay, so a service that loses or gains another node's replicas
    leaves this Deployment (and its running pods) as it is — except ``base`` once the service spans
    several nodes (its selector would match the other nodes' pods)."""
    keep = keep or {}
    names = {node: keep[node] for node in nodes if keep.get(node) and (len(nodes) == 1 or keep[node] != base)}
    taken = set(names.values())
    for number, node in enumerate(nodes):
        if node in names:
            continue
        if len(nodes) == 1:
            names[node] = base
            continue
        while f"{base}-n{number}" in taken:
            number += 1
        names[node] = f"{base}-n{number}"
        taken.add(names[node])
    return names
