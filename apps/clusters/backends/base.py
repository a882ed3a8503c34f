"""The interface every cluster backend implements (:class:`ClusterBackend`) and what they share: the
kinds Suanchi handles (``KINDS``, ``API_VERSIONS``), an apply's result, what is read of a pod.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from apps.clusters.backends.errors import PermanentBackendError

MANAGED_BY = "app.kubernetes.io/managed-by=suanchi"
EXPECTED_DURATION_ANNOTATION = "suanchi.io/expected-duration-seconds"

# kind -> (api class name, snake name used in the client's method names, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("CoreV1Api", "namespace", False),
    "Node": ("CoreV1Api", "node", False),
    "Pod": ("CoreV1Api", "pod", True),
    "ResourceQuota": ("CoreV1Api", "resource_quota", True),
    "Job": ("BatchV1Api", "job", True),
    "Deployment": ("AppsV1Api", "deployment", True),
    "Event": ("CoreV1Api", "event", True),
    # A gang's rendezvous Service and an Ascend job's rank-table ConfigMap (apps.clusters.manifests).
    "Service": ("CoreV1Api", "service", True),
    "ConfigMap": ("CoreV1Api", "config_map", True),
    # Dynamic Resource Allocation, resource.k8s.io/v1 (GA in Kubernetes 1.34).
    "ResourceClaim": ("ResourceV1Api", "resource_claim", True),
    "ResourceClaimTemplate": ("ResourceV1Api", "resource_claim_template", True),
    "DeviceClass": ("ResourceV1Api", "device_class", False),
}
API_VERSIONS = {
    "Namespace": "v1",
    "Node": "v1",
    "Pod": "v1",
    "ResourceQuota": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "Event": "v1",
    "Service": "v1",
    "ConfigMap": "v1",
    "ResourceClaim": "resource.k8s.io/v1",
    "ResourceClaimTemplate": "resource.k8s.io/v1",
    "DeviceClass": "resource.k8s.io/v1",
}


@dataclass
class ApplyResult:
    action: str  # "created" | "unchanged" | "updated"
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    object: dict = field(repr=False, default_factory=dict)


def apply_result(action: str, kind: str, namespace: str, name: str, live: dict) -> ApplyResult:
    meta = live.get("metadata") or {}
    return ApplyResult(
        action, kind, namespace, name, meta.get("uid", ""), meta.get("resourceVersion", ""), live
    )


def object_key(obj: dict) -> tuple[str, str, str]:
    kind = obj.get("kind")
    if kind not in KINDS:
        raise PermanentBackendError(f"unsupported kind {kind!r} (supported: {', '.join(KINDS)})")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise PermanentBackendError(f"{kind} without metadata.name")
    namespace = meta.get("namespace") or ""
    if KINDS[kind][2] and not namespace:
        raise PermanentBackendError(f"{kind} {name!r} without metadata.namespace")
    if not KINDS[kind][2]:
        namespace = ""
    return kind, namespace, name


def object_ref(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


# What the job page reads of a pod (issue 21): its newest events and the tail of its log.
POD_EVENT_LIMIT = 100
LOG_TAIL_LINES = 200
LOG_LIMIT_BYTES = 64 * 1024


@dataclass(frozen=True)
class LogOptions:
    """What to read of a container's log (core/v1 PodLogOptions: container, tailLines, limitBytes,
    previous)."""

    container: str | None = None
    tail_lines: int = LOG_TAIL_LINES
    limit_bytes: int = LOG_LIMIT_BYTES
    previous: bool = False


class ClusterBackend(abc.ABC):
    """What the rest of Suanchi may ask of a cluster. Objects are plain Kubernetes JSON dicts."""

    name = "abstract"

    @abc.abstractmethod
    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """The live object, or None when it does not exist."""

    @abc.abstractmethod
    def apply(self, obj: dict) -> ApplyResult:
        """Create ``obj``; when it exists, compare the fields we own (labels, annotations, spec) and
        leave it ("unchanged") or merge-patch them onto the live object ("updated")."""

    @abc.abstractmethod
    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        """Delete; True when something was deleted, False when it was already gone."""

    @abc.abstractmethod
    def list_owned(self, kind: str, namespace: str | None = None, selector: str = MANAGED_BY) -> list[dict]:
        """Objects of ``kind`` (in ``namespace``, or in all namespaces) matching the label selector."""

    def list_events(self, *, field_selector: str = "") -> list[dict]:
        """core/v1 Events in all namespaces matching a field selector (``reason=FailedCreate``).
        Nothing where the backend has no admission that could refuse a pod (the simulated one)."""
        return []

    def pod_events(self, namespace: str, pod: str, *, limit: int = POD_EVENT_LIMIT) -> list[dict]:
        """core/v1 Events whose involved object is the Pod ``namespace/pod`` (at most ``limit``).
        Nothing where the backend has no events (a test stub)."""
        return []

    def pod_log(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        tail_lines: int = LOG_TAIL_LINES,
        limit_bytes: int = LOG_LIMIT_BYTES,
        previous: bool = False,
    ) -> str:
        """The last ``tail_lines`` lines of a container's log, at most ``limit_bytes`` bytes (the
        semantics of core/v1 PodLogOptions). Backends implement :meth:`_pod_log`."""
        return self._pod_log(namespace, pod, LogOptions(container, tail_lines, limit_bytes, previous))

    def _pod_log(self, namespace: str, pod: str, options: LogOptions) -> str:
        """ "" where the backend has no logs (a test stub)."""
        return ""

    def list_watched(self, kind: str, selector: str = MANAGED_BY) -> list[dict]:
        """Every object of ``kind`` matching ``selector`` in all namespaces, as ``list_owned`` reads
        it; a backend that can watch serves it from a cache kept up to date by watching
        (:class:`KubernetesBackend`). The objects are shared: read them, never change them."""
        return self.list_owned(kind, None, selector)

    def list_watched_kinds(self, wanted: list[tuple[str, str]]) -> list[list[dict]]:
        """``list_watched(kind, selector)`` for each ``(kind, selector)`` of ``wanted``, in that
        order. Here one after the other; :class:`KubernetesBackend` reads them at the same time. The
        first failure (in ``wanted``'s order) is raised once every read has ended."""
        return [self.list_watched(kind, selector) for kind, selector in wanted]

    @abc.abstractmethod
    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        """Merge ``labels`` into the node's labels (a value of None removes the label) and, when
        ``taints`` is not None, make the taints Suanchi owns (``owned_taint``) exactly that list,
        keeping every other taint. Returns the node."""
