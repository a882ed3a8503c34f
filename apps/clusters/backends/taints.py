"""Node labels and taints: which taints Suanchi owns, and the merge patch that swaps only those."""

from __future__ import annotations

import copy

from apps.clusters.backends.errors import PermanentBackendError


def validate_taints(taints: list) -> None:
    for taint in taints:
        if (
            not isinstance(taint, dict)
            or not taint.get("key")
            or taint.get("effect")
            not in (
                "NoSchedule",
                "PreferNoSchedule",
                "NoExecute",
            )
        ):
            raise PermanentBackendError(
                f"invalid taint {taint!r}: needs a key and effect NoSchedule|PreferNoSchedule|NoExecute"
            )


def owned_taint(taint: dict) -> bool:
    """A taint Suanchi manages on Nodes: its own (``suanchi.io/*``: quarantine, maintenance, gray)
    and the vendor accelerator taints the ledger sets (``accelerator=<vendor>``). Everything else
    (``node.kubernetes.io/*``, autoscaler, operators) belongs to someone else."""
    from apps.inventory.vendors import ADAPTERS

    key = str((taint or {}).get("key", ""))
    if key.startswith("suanchi.io/"):
        return True
    return any(key == t["key"] for adapter in ADAPTERS.values() for t in adapter.taints())


def _taint_id(taint: dict) -> tuple:
    return (taint.get("key"), taint.get("value") or "", taint.get("effect"))


def merge_owned_taints(live: list, desired: list) -> list:
    """The live taints with Suanchi's replaced by ``desired``; foreign ones kept, in place. A taint
    already there keeps its server fields (``timeAdded``)."""
    live = [t for t in live or [] if isinstance(t, dict)]
    live_by_id = {_taint_id(t): t for t in live}
    kept = [t for t in live if not owned_taint(t)]
    ours = [copy.deepcopy(live_by_id.get(_taint_id(t), t)) for t in desired]
    seen: set[tuple] = set()
    result = []
    for t in kept + ours:
        ident = (t.get("key"), t.get("effect"))  # Kubernetes: key + effect unique per Node
        if ident not in seen:
            seen.add(ident)
            result.append(t)
    return result


def node_merge_patch(live: dict, labels: dict | None, taints: list | None) -> dict | None:
    """The RFC 7386 merge patch (with ``resourceVersion``) that brings ``live`` to the wanted labels
    and owned taints, or None when nothing changes."""
    meta = live.get("metadata") or {}
    live_labels = meta.get("labels") or {}
    label_patch = {
        k: v
        for k, v in (labels or {}).items()
        if (v is None and k in live_labels) or (v is not None and live_labels.get(k) != v)
    }
    patch: dict = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
    if label_patch:
        patch["metadata"]["labels"] = label_patch
    if taints is not None:
        current = (live.get("spec") or {}).get("taints") or []
        merged = merge_owned_taints(current, taints)
        if [_taint_id(t) for t in merged] != [_taint_id(t) for t in current]:
            patch["spec"] = {"taints": merged or None}
    if len(patch) == 1 and len(patch["metadata"]) == 1:
        return None
    return patch
