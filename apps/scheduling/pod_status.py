"""What a listed pod, Node or Job says about itself: a failed pod's reason, an eviction, its node, a
Node's readiness, a Job with no pod at all (``apps.scheduling.reconcile`` reads them)."""

from __future__ import annotations

from apps.clusters.manifests import HOSTNAME_LABEL
from apps.scheduling.faults import classify_failure


def classify_pod_failure(pod: dict) -> tuple[str, str]:
    """(a readable reason, its runbook key or "") for a failed pod."""
    status = pod.get("status") or {}
    parts = []
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            bits = [term.get("reason") or "", f"exit code {term.get('exitCode')}"]
            if term.get("message"):
                bits.append(term["message"])
            parts.append(f"{cs.get('name') or 'container'}: " + ", ".join(b for b in bits if b))
    if status.get("reason") and not parts:
        parts.append(status["reason"])
    if status.get("message"):
        parts.append(status["message"])
    text = "; ".join(parts) or "pod failed"
    codes = [
        ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
        for cs in status.get("containerStatuses") or []
    ]
    return text, classify_failure(text, next((c for c in codes if c is not None), None))


def disruption(pod: dict) -> dict | None:
    """The pod's ``DisruptionTarget`` condition (True) — set by the taint-eviction controller, the
    eviction API and preemption before they delete a pod (Kubernetes docs: "Pod disruption
    conditions", concepts/workloads/pods/disruptions) — or None."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return cond
    return None


def pod_node(pod: dict) -> str:
    spec = pod.get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL) or ""


def node_ready(node: dict) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True  # no conditions reported (e.g. a simulated node): assume ready


def podless(obj: dict) -> bool:
    """A batch/v1 Job that has no pod at all: nothing active, succeeded, failed or terminating, and
    no condition (the Job controller's status fields are omitempty)."""
    status = obj.get("status") or {}
    return obj.get("kind") == "Job" and not any(
        status.get(k) for k in ("active", "succeeded", "failed", "terminating", "conditions")
    )
