"""Cluster backends: one interface, two implementations, chosen per Cluster row.

- :class:`KubernetesBackend` talks to a real cluster through the official ``kubernetes`` client
  (kubeconfig file per cluster, or the in-cluster service account).
- :class:`SimulatedBackend` keeps the objects in memory and "runs" pods for their expected duration,
  so everything above this interface (push, reconcile, preemption) is shared.

Errors: every failure leaves as a :class:`BackendError`: :class:`TransientBackendError` (5xx,
timeouts, connection resets and refusals, 409 Conflict on an optimistic-concurrency write — retry
later) or :class:`PermanentBackendError` (other 4xx, objects the client refuses to send). 404 on
delete and 409 AlreadyExists on create are not errors (already gone / compare and update). There
are no retries in here: retrying, with backoff, is the caller's (the pusher's) job. ``backend_for``
(a Cluster row → its backend) is in :mod:`apps.clusters.connections`.
"""

from __future__ import annotations

import abc
import copy
import datetime as dt
import json
import random
import re
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

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


class BackendError(Exception):
    """A backend call failed. ``status`` is the HTTP code when there was an answer; ``causes`` the
    Status body's ``details.causes`` ({reason, message, field}) when the server gave them."""

    def __init__(self, message: str, status: int | None = None, reason: str = "", causes: list | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.causes = list(causes or [])


class TransientBackendError(BackendError):
    """Retryable: 5xx, timeouts, connection resets/refusals, 409 Conflict, 429."""


class PermanentBackendError(BackendError):
    """Not retryable: 4xx other than 404/409 (400, 401, 403, 422, ...), objects that cannot be sent."""


class ImmutableFieldError(PermanentBackendError):
    """The live object differs from the desired one in a field the server does not let change
    (422 Invalid, ``field is immutable``: a Job's ``spec.template``, a Deployment's ``spec.selector``
    …). The object cannot be updated in place: it has to be deleted and created again.
    ``fields`` are the refused paths (``spec.template``)."""

    def __init__(self, message: str, fields: list[str], live: dict | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.fields = fields
        self.live = live or {}  # the object that refused the update (its uid, its pod selector)


def immutable_fields(error: BackendError) -> list[str]:
    """The fields a 422 refused as immutable (apimachinery ValidateImmutableField's detail
    ``field is immutable``, reported in the Status ``details.causes``)."""
    if error.status != 422:
        return []
    return [
        c.get("field") or ""
        for c in error.causes
        if isinstance(c, dict) and "field is immutable" in (c.get("message") or "")
    ]


@dataclass
class ApplyResult:
    action: str  # "created" | "unchanged" | "updated"
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    object: dict = field(repr=False, default_factory=dict)


# -- helpers shared by both backends ----------------------------------------------------------------


def _key(obj: dict) -> tuple[str, str, str]:
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


def _ref(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field set in ``desired`` has the same value in ``live`` (the server may add
    defaults and status; lists must have the same length, compared item by item)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(is_subset(v, live.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(map(is_subset, desired, live))
    if (
        isinstance(desired, int | float)
        and isinstance(live, str)
        or isinstance(desired, str)
        and isinstance(live, int | float)
    ):
        return str(desired) == str(live)  # quantities: 1 vs "1"
    return desired == live


def owned_patch(desired: dict) -> dict:
    """The fields Suanchi owns on an object: labels, annotations, and spec (and data for the rare
    kinds that carry it)."""
    meta = desired.get("metadata") or {}
    patch: dict = {"metadata": {}}
    for key in ("labels", "annotations"):
        if meta.get(key):
            patch["metadata"][key] = meta[key]
    for key in ("spec", "data"):
        if key in desired:
            patch[key] = desired[key]
    return patch


# What Suanchi last applied to an object (its owned fields, JSON), as kubectl's client-side apply
# keeps ``kubectl.kubernetes.io/last-applied-configuration`` (Kubernetes docs "Declarative Management
# of Kubernetes Objects Using Configuration Files" → "How apply calculates differences and merges
# changes"): a key that was applied and is no longer desired is sent as null, because a JSON merge
# patch (RFC 7386 §2) keeps every key the patch does not mention.
LAST_APPLIED_ANNOTATION = "suanchi.io/last-applied"

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")


def canonical_quantity(value: Any) -> Any:
    """A resource Quantity as kube-apiserver stores it (k8s.io/apimachinery/pkg/api/resource
    Quantity.String: ``1000m`` → ``1``, ``0.5`` → ``500m``, ``1024Mi`` → ``1Gi``, ``1000`` → ``1k``);
    anything that is not a quantity is returned as it is (the server will say what is wrong)."""
    from decimal import ROUND_CEILING, Decimal

    m = _QUANTITY.match(str(value).strip()) if isinstance(value, str | int) else None
    if m is None or isinstance(value, bool):
        return value
    number, suffix = Decimal(m.group(1)), m.group(2)
    binary = suffix in _BINARY_SUFFIXES
    if binary:
        amount = number * 1024 ** _BINARY_SUFFIXES[suffix]
    elif suffix[:1] in ("e", "E"):
        amount = number * Decimal(10) ** int(suffix[1:])
    else:
        amount = number * Decimal(10) ** _DECIMAL_SUFFIXES[suffix]
    if amount == 0:
        return "0"
    if binary and amount == amount.to_integral_value():
        for suffix, power in sorted(_BINARY_SUFFIXES.items(), key=lambda kv: -kv[1]):
            if abs(amount) >= 1024**power and amount % 1024**power == 0:
                return f"{int(amount // 1024**power)}{suffix}"
        return str(int(amount))
    nanos = (amount * Decimal(10) ** 9).to_integral_value(rounding=ROUND_CEILING)
    for suffix, exp in sorted(_DECIMAL_SUFFIXES.items(), key=lambda kv: -kv[1]):
        scale = Decimal(10) ** (exp + 9)
        if nanos % scale == 0:
            return f"{int(nanos // scale)}{suffix}"
    return f"{int(nanos)}n"


def normalised(obj: Any, key: str = "") -> Any:
    """``obj`` as the API server would store and return it, for comparison: quantities of
    ``resources.limits`` / ``requests`` and a ResourceQuota's ``hard`` canonical, an empty
    ``env[].value`` dropped (k8s.io/api core/v1 EnvVar ``value,omitempty``)."""
    if isinstance(obj, dict):
        if key in ("limits", "requests", "hard"):
            return {k: canonical_quantity(v) for k, v in obj.items()}
        return {k: normalised(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [normalised(v) for v in obj]
        if key == "env":
            items = [
                {k: v for k, v in item.items() if not (k == "value" and v == "")}
                if isinstance(item, dict)
                else item
                for item in items
            ]
        return items
    return obj


def _removals(last: Any, desired: Any, live: Any) -> dict:
    """Null for each key Suanchi applied before (``last``), no longer desires, and the live object
    still has; nested maps recurse (lists are replaced whole by a merge patch anyway)."""
    out: dict = {}
    if not (isinstance(last, dict) and isinstance(live, dict)):
        return out
    desired = desired if isinstance(desired, dict) else {}
    for k, v in last.items():
        if k not in live:
            continue
        if k not in desired:
            out[k] = None
        elif isinstance(v, dict) and isinstance(desired[k], dict):
            inner = _removals(v, desired[k], live[k])
            if inner:
                out[k] = inner
    return out


def _deep_merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def with_last_applied(desired: dict) -> dict:
    """``desired`` (normalised) with the last-applied annotation recording its owned fields."""
    body = normalised(copy.deepcopy(desired))
    owned = owned_patch(body)
    record = json.dumps(owned, sort_keys=True, separators=(",", ":"))
    body.setdefault("metadata", {}).setdefault("annotations", {})
    body["metadata"]["annotations"] = {
        **(body["metadata"]["annotations"] or {}),
        LAST_APPLIED_ANNOTATION: record,
    }
    return body


def apply_patch(desired: dict, live: dict) -> dict | None:
    """The merge patch that brings ``live`` to ``desired`` for the fields Suanchi owns, or None when
    it is already there (compared after normalisation; nothing is written for a no-op). Keys of the
    last applied configuration that are no longer desired are removed (null)."""
    body = with_last_applied(desired)
    patch = owned_patch(body)
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    try:
        last = json.loads(annotations.get(LAST_APPLIED_ANNOTATION) or "{}")
    except ValueError:
        last = {}
    removals = _removals(last, patch, live) if isinstance(last, dict) else {}
    if not removals and is_subset(patch, live):
        return None
    return _deep_merge(patch, removals)


def differs(desired: dict, live: dict) -> bool:
    return apply_patch(desired, live) is not None


def parse_selector(selector: str | None) -> list[tuple[str, str, str | None]]:
    """Equality-based label selector: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, comma = AND."""
    reqs: list[tuple[str, str, str | None]] = []
    for part in (p.strip() for p in (selector or "").split(",")):
        if not part:
            continue
        if "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append((k.strip(), "!=", v.strip()))
        elif "=" in part:
            k, v = re.split(r"==?", part, maxsplit=1)
            reqs.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            reqs.append((part[1:].strip(), "!exists", None))
        else:
            reqs.append((part, "exists", None))
    return reqs


def selector_matches(labels: dict, reqs) -> bool:
    for key, op, value in reqs:
        if (
            (op == "=" and labels.get(key) != value)
            or (op == "!=" and labels.get(key) == value)
            or (op == "exists" and key not in labels)
            or (op == "!exists" and key in labels)
        ):
            return False
    return True


def _validate_taints(taints: list) -> None:
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


NODE_PATCH_ATTEMPTS = 5
# What the job page reads of a pod (issue 21): its newest events and the tail of its log.
POD_EVENT_LIMIT = 100
LOG_TAIL_LINES = 200
LOG_LIMIT_BYTES = 64 * 1024
LOG_STEP_S = 10  # a simulated container writes one log line every 10 simulated seconds


@dataclass(frozen=True)
class LogOptions:
    """What to read of a container's log (core/v1 PodLogOptions: container, tailLines, limitBytes,
    previous)."""

    container: str | None = None
    tail_lines: int = LOG_TAIL_LINES
    limit_bytes: int = LOG_LIMIT_BYTES
    previous: bool = False


# Objects per list call (reconcile reads every owned Job, Deployment, Pod and Node of a cluster).
LIST_PAGE_SIZE = 500


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


# -- the interface ------------------------------------------------------------------------------------


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


# -- watched views ---------------------------------------------------------------------------------
# A watch reads only what changed since a resourceVersion; a full relist still happens this often.
WATCH_RESYNC_S = 300.0
# ``timeoutSeconds`` of one catch-up watch: the server ends the stream after it. The watch cache
# sends its only BOOKMARK of such a watch 2 s before that deadline (none when it is 2 s or less
# away; kubernetes staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go
# ``nextBookmarkTime``), so 3 s puts it about 1 s into the stream: the end of a stream that never
# falls silent (a busy Node stream). Nothing relies on it coming.
WATCH_TIMEOUT_S = 3
# How long a catch-up watch may wait for its response headers: API Priority and Fairness may queue
# the request, and a watch cache behind the version asked for blocks up to 3 s before it answers
# (storage/cacher/watch_cache.go ``blockTimeout = 3 * time.Second``).
WATCH_HEADERS_S = 6.0
# Once the headers came, a stream silent this long has sent every change there was (the watch
# cache sends the replay as soon as the watch starts).
WATCH_IDLE_S = 0.5


def _response_socket(response: Any):
    """The socket a streamed urllib3 response reads from: its connection's, or, once http.client
    let go of it there (an answer with ``Connection: close``: http/client.py HTTPConnection.getresponse
    closes the connection object and the response's file keeps the socket), the file's. None when
    neither is there."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        raw = getattr(getattr(getattr(response, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    return sock if hasattr(sock, "settimeout") else None


def _view_key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


@dataclass
class WatchedView:
    """What this process knows of one kind of one cluster: the objects at ``resource_version``.
    Kept per process (the per-cluster reconcile lock keeps two processes from working one cluster
    at once; in a process, ``lock`` makes readers take turns)."""

    items: dict[tuple[str, str], dict] = field(default_factory=dict)
    resource_version: str = ""
    listed_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    lists: int = 0  # full lists made
    watches: int = 0  # catch-up watches made
    events: int = 0  # watch events applied

    def clear(self) -> None:
        self.items, self.resource_version = {}, ""

    # One registry per process: (cluster, API server, kind, selector) -> view.
    _all: ClassVar[dict[tuple, WatchedView]] = {}
    _all_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def of(cls, cluster_id: tuple, kind: str, selector: str) -> WatchedView:
        with cls._all_lock:
            return cls._all.setdefault((*cluster_id, kind, selector), cls())

    @classmethod
    def forget(cls, cluster_id: tuple | None = None) -> None:
        """Drop the views of one cluster (all when None): the next read lists."""
        with cls._all_lock:
            for key in [k for k in cls._all if cluster_id is None or k[: len(cluster_id)] == cluster_id]:
                del cls._all[key]


# -- Kubernetes --------------------------------------------------------------------------------------


class KubernetesBackend(ClusterBackend):
    name = "kubernetes"

    def __init__(
        self,
        cluster_or_kubeconfig_path=None,
        context: str | None = None,
        in_cluster: bool = False,
        timeout: float = 10,
    ):
        from kubernetes import client, config

        from apps.clusters.kubeconfig_safety import kubeconfig_for_client

        kubeconfig = cluster_or_kubeconfig_path
        if (
            kubeconfig is not None
            and not isinstance(kubeconfig, str | bytes)
            and hasattr(kubeconfig, "backend")
        ):
            cluster = kubeconfig
            kubeconfig = cluster.kubeconfig_path or None
            context = context or cluster.kube_context or None
            in_cluster = in_cluster or cluster.in_cluster
        # Every call is bounded: ``_request_timeout`` (the official client's per-request limit, a
        # total for connect + answer: kubernetes/client/rest.py RESTClientObject.request turns a
        # number into urllib3.Timeout(total=...)); a pass of several calls (paged lists) is also
        # bounded as a whole by ``deadline`` (``set_deadline``): no call starts after it, and none
        # waits past it.
        self.timeout = timeout
        self.deadline: float | None = None  # time.monotonic() value
        configuration = client.Configuration()
        try:
            if in_cluster:
                config.load_incluster_config(client_configuration=configuration)
            else:
                # Read and checked here, handed over as a dict: no program runs, no file is read
                # besides this one, nothing is written back (apps.clusters.kubeconfig_safety).
                config.load_kube_config_from_dict(
                    kubeconfig_for_client(kubeconfig),
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except Exception as e:  # ConfigException, missing file, bad YAML, a refused field
            where = "in-cluster config" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
            raise PermanentBackendError(f"cannot load {where}: {e}") from e
        configuration.retries = False  # no hidden retries: the caller decides
        self.api_client = client.ApiClient(configuration)
        # The watched views of this cluster (list_watched): its row and its API server.
        self._view_id = (
            getattr(cluster_or_kubeconfig_path, "pk", None) or str(kubeconfig),
            configuration.host,
        )
        self._apis = {
            "CoreV1Api": client.CoreV1Api(self.api_client),
            "BatchV1Api": client.BatchV1Api(self.api_client),
            "AppsV1Api": client.AppsV1Api(self.api_client),
            "ResourceV1Api": client.ResourceV1Api(self.api_client),
        }

    def close(self) -> None:
        self.api_client.close()

    def set_deadline(self, seconds: float | None) -> None:
        """Bound the calls made from now on to ``seconds`` in all (None: each call by ``timeout`` only)."""
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def _timeout(self, what: str) -> float:
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TransientBackendError(f"{what}: not sent, the pass ran out of time (deadline exceeded)")
        return min(self.timeout, left)

    # The client's typed methods, e.g. create_namespaced_job / read_node / list_pod_for_all_namespaces.
    def _method(self, verb: str, kind: str, all_namespaces: bool = False):
        if kind not in KINDS:
            raise PermanentBackendError(f"unsupported kind {kind!r} (supported: {', '.join(KINDS)})")
        api_name, snake, namespaced = KINDS[kind]
        if verb == "list" and all_namespaces and namespaced:
            method = f"list_{snake}_for_all_namespaces"
        else:
            method = f"{verb}_namespaced_{snake}" if namespaced else f"{verb}_{snake}"
        return getattr(self._apis[api_name], method), namespaced

    def _call(self, what: str, func, *args, **kwargs) -> dict:
        """Call the client without model deserialization; map every failure."""
        data = self._call_bytes(what, func, *args, **kwargs)
        try:
            return json.loads(data) if data else {}
        except ValueError as e:  # a 2xx answer that is not JSON
            raise TransientBackendError(f"{what}: unreadable answer ({e})") from e

    def _call_bytes(self, what: str, func, *args, **kwargs) -> bytes:
        """The raw body of a client call (JSON, or text/plain for a pod log); every failure mapped.
        ``_request_timeout`` as one number bounds the whole request (kubernetes/client/rest.py turns
        it into ``urllib3.Timeout(total=...)``)."""
        from kubernetes.client.exceptions import ApiException
        from pydantic import ValidationError
        from urllib3.exceptions import HTTPError, ProtocolError
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        timeout = self._timeout(what)
        try:
            response = func(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            return response.data if hasattr(response, "data") else response.read()
        except ApiException as e:
            raise self._map_api_exception(what, e) from e
        except ValidationError as e:
            errors = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:5])
            raise PermanentBackendError(f"{what}: invalid object: {errors}") from e
        except Urllib3Timeout as e:  # includes connect timeouts and refusals (NewConnectionError)
            raise TransientBackendError(f"{what}: timed out or could not connect ({e})") from e
        except ProtocolError as e:
            raise TransientBackendError(f"{what}: connection broken ({e})") from e
        except HTTPError as e:
            raise TransientBackendError(f"{what}: HTTP transport error ({e})") from e
        except (ConnectionError, TimeoutError, OSError) as e:
            raise TransientBackendError(f"{what}: network error ({e})") from e
        except ValueError as e:  # a 2xx answer that is not JSON
            raise TransientBackendError(f"{what}: unreadable answer ({e})") from e

    @staticmethod
    def _map_api_exception(what: str, e) -> BackendError:
        status = e.status or 0
        reason, message, causes = e.reason or "", "", []
        try:
            body = json.loads(e.body or "{}")
            if isinstance(body, dict):
                message = body.get("message") or ""
                reason = body.get("reason") or reason
                details = body.get("details")
                if isinstance(details, dict) and isinstance(details.get("causes"), list):
                    causes = details["causes"]
        except ValueError:
            message = (e.body or "")[:500]
        text = f"{what}: {status} {reason}: {message}".rstrip(": ")
        if status >= 500 or status in (0, 408, 429) or (status == 409 and reason == "Conflict"):
            return TransientBackendError(text, status, reason, causes)
        return PermanentBackendError(text, status, reason, causes)

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        func, namespaced = self._method("read", kind)
        args = (name, namespace) if namespaced else (name,)
        try:
            return self._call(f"get {_ref(kind, namespace or '', name)}", func, *args)
        except PermanentBackendError as e:
            if e.status == 404:
                return None
            raise

    def apply(self, obj: dict) -> ApplyResult:
        kind, namespace, name = _key(obj)
        ref = _ref(kind, namespace, name)
        body = with_last_applied(obj)
        body.setdefault("apiVersion", API_VERSIONS[kind])
        func, namespaced = self._method("create", kind)
        try:
            live = self._call(f"create {ref}", func, *((namespace, body) if namespaced else (body,)))
            return self._result("created", kind, namespace, name, live)
        except PermanentBackendError as e:
            if e.status != 409:
                raise
        live = self.get(kind, namespace, name)
        if live is None:
            raise TransientBackendError(f"create {ref}: 409 AlreadyExists, but it was gone when read back")
        patch = apply_patch(obj, live)
        if patch is None:
            return self._result("unchanged", kind, namespace, name, live)
        patch.setdefault("metadata", {})["resourceVersion"] = live["metadata"]["resourceVersion"]
        func, _ = self._method("patch", kind)
        args = (name, namespace, patch) if namespaced else (name, patch)
        try:
            updated = self._call(f"update {ref}", func, *args, _content_type="application/merge-patch+json")
        except PermanentBackendError as e:
            fields = immutable_fields(e)
            if fields:
                # pkg/apis/batch/validation ValidateJobSpecUpdate, pkg/apis/apps/validation
                # ValidateDeploymentUpdate: the object must be replaced, not patched.
                raise ImmutableFieldError(
                    e.message,
                    fields,
                    live=live,
                    status=e.status,
                    reason=e.reason,
                    causes=e.causes,
                ) from e
            raise
        return self._result("updated", kind, namespace, name, updated)

    @staticmethod
    def _result(action: str, kind: str, namespace: str, name: str, live: dict) -> ApplyResult:
        meta = live.get("metadata") or {}
        return ApplyResult(
            action, kind, namespace, name, meta.get("uid", ""), meta.get("resourceVersion", ""), live
        )

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        func, namespaced = self._method("delete", kind)
        args = (name, namespace) if namespaced else (name,)
        kwargs = {"propagation_policy": "Background"} if kind in ("Job", "Deployment") else {}
        try:
            self._call(f"delete {_ref(kind, namespace or '', name)}", func, *args, **kwargs)
            return True
        except PermanentBackendError as e:
            if e.status == 404:
                return False
            raise

    def list_owned(self, kind: str, namespace: str | None = None, selector: str = MANAGED_BY) -> list[dict]:
        """Every matching object, read in pages of ``LIST_PAGE_SIZE`` (``limit`` / ``continue``: the
        server answers from one consistent snapshot, so a page boundary never loses or repeats an
        object; Kubernetes API concepts, "Retrieving large results sets in chunks"). A token that
        expired (410 Gone: its snapshot was compacted) restarts the list once from the beginning."""
        return self._list_pages(kind, namespace, selector)[0]

    def _list_pages(self, kind: str, namespace: str | None, selector: str) -> tuple[list[dict], str]:
        """``list_owned`` and the list's ``metadata.resourceVersion`` (the snapshot every page came
        from: the version a watch continues from)."""
        func, namespaced = self._method("list", kind, all_namespaces=not namespace)
        args = (namespace,) if namespaced and namespace else ()
        where = f" in {namespace}" if namespace else ""
        what = f"list {kind}{where} ({selector})"
        items: list[dict] = []
        token, restarted = "", False
        while True:
            page = {"_continue": token} if token else {}
            try:
                result = self._call(
                    what, func, *args, label_selector=selector or None, limit=LIST_PAGE_SIZE, **page
                )
            except PermanentBackendError as e:
                if e.status == 410 and token and not restarted:
                    items, token, restarted = [], "", True
                    continue
                raise
            items.extend(result.get("items") or [])
            token = (result.get("metadata") or {}).get("continue") or ""
            if not token:
                break
        for item in items:  # lists carry items without kind/apiVersion
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", API_VERSIONS[kind])
        return items, str((result.get("metadata") or {}).get("resourceVersion") or "")

    def list_watched(self, kind: str, selector: str = MANAGED_BY) -> list[dict]:
        """The objects of ``kind`` matching ``selector`` in all namespaces, from this process's
        :class:`WatchedView` of the cluster: the first read lists (paged, ``list_owned``) and keeps
        the list's ``resourceVersion``; a later read watches from that version and applies only the
        changes since ("list, then watch from the list's resourceVersion": Kubernetes API concepts,
        "Efficient detection of changes"). A 410 Expired (the version left the server's history)
        or any other refusal of the watch relists; so does a view older than ``WATCH_RESYNC_S``
        (informers resync the same way). The objects are shared with the view: read only."""
        view = WatchedView.of(self._view_id, kind, selector)
        with view.lock:  # one reader at a time in this process (other processes have their own view)
            due = not view.resource_version or time.monotonic() - view.listed_at >= WATCH_RESYNC_S
            if due or not self._catch_up(view, kind, selector):
                self._relist(view, kind, selector)
            return list(view.items.values())

    def list_watched_kinds(self, wanted: list[tuple[str, str]]) -> list[list[dict]]:
        """``list_watched`` of every ``(kind, selector)`` at the same time, one thread each, so a
        pass waits for the slowest kind, not for the sum of them. Each read keeps its own bounds
        (``_timeout``, the pass deadline, the watch's header and idle limits). The threads share
        this backend's ``ApiClient``: a call keeps no state on it (kubernetes/client/api_client.py
        ``call_api`` returns the response it got) and its transport is urllib3's ``PoolManager``,
        whose pools are a "Thread-safe connection pool for one host" (urllib3/connectionpool.py);
        the client's pool holds ``connection_pool_maxsize`` connections (CPU count x 5) and opens
        more when they are busy. Each kind has its own :class:`WatchedView` and lock."""
        if len(wanted) <= 1:
            return super().list_watched_kinds(wanted)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(wanted), thread_name_prefix="list-watched") as pool:
            futures = [pool.submit(self.list_watched, kind, selector) for kind, selector in wanted]
        # The pool waited for every read (each is bounded): raise the first failure in order.
        return [f.result() for f in futures]

    def _relist(self, view: WatchedView, kind: str, selector: str) -> None:
        view.clear()
        items, rv = self._list_pages(kind, None, selector)
        view.items = {_view_key(o): o for o in items}
        view.resource_version, view.listed_at = rv, time.monotonic()
        view.lists += 1

    def _catch_up(self, view: WatchedView, kind: str, selector: str) -> bool:
        """Apply the events after ``view.resource_version``: a watch from that version with a short
        ``timeoutSeconds`` (``WATCH_TIMEOUT_S``), read until the first of

        - ``WATCH_IDLE_S`` without a byte once the response headers came: caught up. The watch cache
          sends every change after the version at once when the watch starts, so a silent stream has
          nothing more to send;
        - a BOOKMARK (every change up to its version was sent): an earlier end where one comes. A real
          API server sends none after the replay, only 2 s before the deadline or once a minute
          (``WATCH_TIMEOUT_S``), so nothing waits for one;
        - the end of the stream (the server's ``timeoutSeconds``), or ``WATCH_TIMEOUT_S +
          WATCH_IDLE_S`` after the headers on our side (a stream that never falls silent).

        The wait for the headers has its own limit, ``WATCH_HEADERS_S`` (a request queued by API
        Priority and Fairness, a lagging watch cache), within the call's ``_timeout``.

        Why not something exact: a consistent list (``resourceVersionMatch``) reads everything again,
        which is what the watch avoids; ``sendInitialEvents`` (a watch that ends its initial events
        with a bookmark) needs a server with WatchList enabled and starts from the whole state, not
        from our version. A watch from our version that stopped early is still correct: the events
        come in resourceVersion order, so the view is consistent at the last one applied, and the
        next pass continues from there.

        False when the server refuses to continue from there (the caller relists); a failure before
        any answer is the cluster's error (raised)."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        func, _ = self._method("list", kind, all_namespaces=True)
        what = f"watch {kind} ({selector}) from {view.resource_version}"
        timeout = self._timeout(what)
        # return_type=object: the client hands back the JSON objects as they are (no model
        # deserialization) and still turns an ERROR event into an ApiException (kubernetes/watch/watch.py).
        w = watch.Watch(return_type=object)
        opened: list[float] = []
        idle = min(WATCH_IDLE_S, timeout)

        def call(*args, **kwargs):
            # The client returns once the headers came (urllib3 preload_content=False): from then on
            # each read of the socket waits at most ``idle`` (the read timeout below covered the
            # headers only; urllib3 sets it again on a connection it reuses).
            response = func(*args, **kwargs)
            opened.append(time.monotonic())
            sock = _response_socket(response)
            if sock is not None:  # else each read waits up to the header limit (still bounded)
                sock.settimeout(idle)
            return response

        # (connect, read) timeouts (kubernetes/client/rest.py: a pair becomes urllib3.Timeout(connect=,
        # read=)); the read timeout is the wait for the headers.
        stream = w.stream(
            call,
            resource_version=view.resource_version,
            timeout_seconds=max(1, min(WATCH_TIMEOUT_S, int(timeout))),
            allow_watch_bookmarks=True,
            label_selector=selector or None,
            _request_timeout=(timeout, min(WATCH_HEADERS_S, timeout)),
        )
        try:
            for event in stream:
                obj = event.get("raw_object") or {}
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                kind_of = event.get("type")
                if kind_of == "BOOKMARK":
                    view.resource_version = rv or view.resource_version
                    break
                if kind_of in ("ADDED", "MODIFIED"):
                    obj.setdefault("kind", kind)
                    obj.setdefault("apiVersion", API_VERSIONS[kind])
                    view.items[_view_key(obj)] = obj
                elif kind_of == "DELETED":
                    view.items.pop(_view_key(obj), None)
                else:
                    return False  # not an event type of the API: trust nothing, relist
                view.resource_version = rv or view.resource_version
                view.events += 1
                if time.monotonic() - opened[0] >= WATCH_TIMEOUT_S + WATCH_IDLE_S:
                    break  # never silent: consistent here, the next pass goes on from this version
        except ApiException as e:  # an ERROR event (410 Expired, ...) or a refused request
            if e.status in (401, 403):
                raise self._map_api_exception(what, e) from e
            return False
        except (HTTPError, OSError) as e:
            if not opened:  # no answer at all: the cluster's error, as a failed list would be
                view.clear()
                raise TransientBackendError(f"{what}: {e}") from e
            # answered, then silent or cut: consistent at the last event applied
        finally:
            w.stop()
            stream.close()
        view.watches += 1
        return True

    def list_events(self, *, field_selector: str = "") -> list[dict]:
        """Events carry no labels of ours: they are selected by field (Kubernetes docs "Field
        Selectors"; Event fields: pkg/registry/core/event/strategy.go, e.g. ``reason``,
        ``involvedObject.uid``)."""
        func, _ = self._method("list", "Event", all_namespaces=True)
        result = self._call(f"list Event ({field_selector})", func, field_selector=field_selector or None)
        return result.get("items") or []

    def pod_events(self, namespace: str, pod: str, *, limit: int = POD_EVENT_LIMIT) -> list[dict]:
        """``CoreV1Api.list_namespaced_event`` with ``fieldSelector=involvedObject.kind=Pod,
        involvedObject.name=<pod>`` (Event selectable fields: pkg/registry/core/event/strategy.go
        ToSelectableFields) and ``limit`` (Kubernetes API concepts, "Retrieving large results sets
        in chunks"; one page is all the page shows)."""
        api = self._apis["CoreV1Api"]
        result = self._call(
            f"list Event of pod {namespace}/{pod}",
            api.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}",
            limit=limit,
        )
        return result.get("items") or []

    def _pod_log(self, namespace: str, pod: str, options: LogOptions) -> str:
        """``CoreV1Api.read_namespaced_pod_log``: GET /api/v1/namespaces/{ns}/pods/{name}/log,
        text/plain, with ``tailLines`` / ``limitBytes`` / ``container`` / ``previous`` (Kubernetes API
        reference, Pod v1 "read log of the specified Pod"). The bytes are decoded as UTF-8 with
        replacement: ``limitBytes`` may cut a character in two."""
        api = self._apis["CoreV1Api"]
        kwargs: dict[str, Any] = {"tail_lines": options.tail_lines, "limit_bytes": options.limit_bytes}
        if options.container:
            kwargs["container"] = options.container
        if options.previous:
            kwargs["previous"] = True
        data = self._call_bytes(
            f"read log of pod {namespace}/{pod}", api.read_namespaced_pod_log, pod, namespace, **kwargs
        )
        return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data or "")

    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        """Read-modify-write of the labels and taints Suanchi owns, guarded by the Node's
        ``resourceVersion`` and retried on 409 Conflict. ``Node.spec.taints`` has no patch strategy
        (a patch replaces the whole list, k8s.io/api core/v1 NodeSpec), so the list sent is the live
        one with only Suanchi's taints swapped: cordon (``node.kubernetes.io/unschedulable``),
        not-ready, autoscaler and operator taints survive. A merge patch carrying
        ``metadata.resourceVersion`` is refused with 409 when the Node changed since it was read
        (Kubernetes API concepts, "Resource versions" / optimistic concurrency)."""
        if taints is not None:
            _validate_taints(taints)
        func, _ = self._method("patch", "Node")
        last: BackendError | None = None
        for _attempt in range(NODE_PATCH_ATTEMPTS):
            live = self.get("Node", None, name)
            if live is None:
                raise PermanentBackendError(
                    f'patch Node {name}: 404 NotFound: nodes "{name}" not found', 404, "NotFound"
                )
            patch = node_merge_patch(live, labels, taints)
            if patch is None:
                return live
            try:
                return self._call(
                    f"patch Node {name}", func, name, patch, _content_type="application/merge-patch+json"
                )
            except TransientBackendError as e:
                if e.status != 409:
                    raise
                last = e  # the Node changed under us (a kubelet, an operator): read it again
        raise TransientBackendError(
            f"patch Node {name}: still conflicting after {NODE_PATCH_ATTEMPTS} attempts ({last})",
            409,
            "Conflict",
        )


# -- simulated ----------------------------------------------------------------------------------------


class SimulatedBackend(ClusterBackend):
    """In-memory cluster. A Job gets one pod, a Deployment ``replicas`` pods, like the controllers.

    Pods stay Pending for 1-5 simulated seconds, then run; a Job's pod succeeds after its expected
    duration (annotation ``suanchi.io/expected-duration-seconds`` on the Job or its template,
    default ``default_duration``) times a random factor in [0.9, 1.1]; Deployment pods run until
    deleted. All randomness comes from ``seed``, so a run is reproducible; time only moves with
    :meth:`advance`.
    """

    name = "simulated"

    def __init__(self, seed: int = 0, default_duration: float = 3600.0, now: dt.datetime | None = None):
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._store: dict[tuple[str, str, str], dict] = {}
        self._rv = 0
        self._t = 0.0
        self._epoch = now or dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
        self.default_duration = default_duration
        # pod key -> {"start_at": t, "end_at": t | None}
        self._schedule: dict[tuple[str, str, str], dict] = {}

    # -- state ------------------------------------------------------------------------------------
    def to_state(self) -> dict:
        """Everything needed to carry on elsewhere (another process, after a restart), as JSON."""
        with self._lock:
            version, internal, gauss = self._rng.getstate()
            return {
                "objects": [[*key, obj] for key, obj in sorted(self._store.items())],
                "schedule": [[*key, plan] for key, plan in sorted(self._schedule.items())],
                "rv": self._rv,
                "t": self._t,
                "epoch": self._epoch.isoformat(),
                "default_duration": self.default_duration,
                "rng": [version, list(internal), gauss],
            }

    @classmethod
    def from_state(cls, state: dict, seed: int = 0) -> SimulatedBackend:
        epoch = dt.datetime.fromisoformat(state["epoch"]) if state.get("epoch") else None
        backend = cls(seed=seed, default_duration=state.get("default_duration", 3600.0), now=epoch)
        backend._store = {(k, ns, n): obj for k, ns, n, obj in state.get("objects", [])}
        backend._schedule = {(k, ns, n): plan for k, ns, n, plan in state.get("schedule", [])}
        backend._rv = state.get("rv", 0)
        backend._t = state.get("t", 0.0)
        if state.get("rng"):
            version, internal, gauss = state["rng"]
            backend._rng.setstate((version, tuple(internal), gauss))
        return backend

    # -- time -------------------------------------------------------------------------------------
    @property
    def clock(self) -> float:
        """Simulated seconds since the backend was created."""
        return self._t

    def simulated_now(self) -> dt.datetime:
        """The simulated instant now (the epoch plus the simulated seconds)."""
        return self._epoch + dt.timedelta(seconds=self._t)

    def _ts(self) -> str:
        return (self._epoch + dt.timedelta(seconds=self._t)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _bump(self, obj: dict) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    # -- interface --------------------------------------------------------------------------------
    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        self._check_kind(kind)
        with self._lock:
            obj = self._store.get((kind, (namespace or "") if KINDS[kind][2] else "", name))
            return copy.deepcopy(obj) if obj else None

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in KINDS:
            raise PermanentBackendError(f"unsupported kind {kind!r} (supported: {', '.join(KINDS)})")

    def apply(self, obj: dict) -> ApplyResult:
        kind, namespace, name = _key(obj)
        ref = _ref(kind, namespace, name)
        if obj.get("apiVersion", API_VERSIONS[kind]) != API_VERSIONS[kind]:
            raise PermanentBackendError(
                f"create {ref}: apiVersion {obj.get('apiVersion')!r} is not {API_VERSIONS[kind]}"
            )
        if kind == "Node" and (obj.get("spec") or {}).get("taints") is not None:
            _validate_taints(obj["spec"]["taints"])
        with self._lock:
            if namespace and ("Namespace", "", namespace) not in self._store:
                raise PermanentBackendError(
                    f'create {ref}: 404 NotFound: namespaces "{namespace}" not found', 404, "NotFound"
                )
            live = self._store.get((kind, namespace, name))
            if live is None:
                live = with_last_applied(obj)
                live["apiVersion"] = API_VERSIONS[kind]
                meta = live["metadata"]
                meta.update(uid=self._uid(), creationTimestamp=self._ts(), generation=1)
                if namespace:
                    meta["namespace"] = namespace
                if kind == "Namespace":
                    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
                    live["status"] = {"phase": "Active"}
                self._bump(live)
                self._store[(kind, namespace, name)] = live
                self._after_create(kind, live)
                return KubernetesBackend._result("created", kind, namespace, name, copy.deepcopy(live))
            patch = apply_patch(obj, live)
            if patch is None:
                return KubernetesBackend._result("unchanged", kind, namespace, name, copy.deepcopy(live))
            old_spec = copy.deepcopy(live.get("spec"))
            for key in ("labels", "annotations"):
                if key in patch.get("metadata", {}):
                    live["metadata"][key] = _merge(live["metadata"].get(key) or {}, patch["metadata"][key])
            for key in ("spec", "data"):
                if key in patch:
                    live[key] = _merge(live.get(key), patch[key])
            if live.get("spec") != old_spec:
                live["metadata"]["generation"] += 1
            self._bump(live)
            return KubernetesBackend._result("updated", kind, namespace, name, copy.deepcopy(live))

    def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        self._check_kind(kind)
        namespace = (namespace or "") if KINDS[kind][2] else ""
        with self._lock:
            obj = self._store.pop((kind, namespace, name), None)
            if obj is None:
                return False
            if kind == "Namespace":
                for key in [k for k in self._store if k[1] == name]:
                    self._store.pop(key)
                    self._schedule.pop(key, None)
            elif kind in ("Job", "Deployment"):  # propagationPolicy Background
                uid = obj["metadata"]["uid"]
                for key, pod in list(self._store.items()):
                    if key[0] == "Pod" and key[1] == namespace and _owner_uid(pod) == uid:
                        self._store.pop(key)
                        self._schedule.pop(key, None)
            self._schedule.pop((kind, namespace, name), None)
            return True

    def list_owned(self, kind: str, namespace: str | None = None, selector: str = MANAGED_BY) -> list[dict]:
        self._check_kind(kind)
        reqs = parse_selector(selector)
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (k, ns, _), obj in sorted(self._store.items())
                if k == kind
                and (not namespace or ns == namespace)
                and selector_matches(obj["metadata"].get("labels") or {}, reqs)
            ]

    def patch_node(self, name: str, labels: dict | None = None, taints: list | None = None) -> dict:
        with self._lock:
            node = self._store.get(("Node", "", name))
            if node is None:
                raise PermanentBackendError(
                    f'patch Node {name}: 404 NotFound: nodes "{name}" not found', 404, "NotFound"
                )
            if taints is not None:
                _validate_taints(taints)
            node_labels = node["metadata"].setdefault("labels", {})
            for key, value in (labels or {}).items():
                if value is None:
                    node_labels.pop(key, None)
                else:
                    node_labels[key] = value
            if taints is not None:  # only Suanchi's taints are replaced, as on a real cluster
                spec = node.setdefault("spec", {})
                merged = merge_owned_taints(spec.get("taints") or [], taints)
                if merged:
                    spec["taints"] = merged
                else:
                    spec.pop("taints", None)
            self._bump(node)
            return copy.deepcopy(node)

    # -- simulation -------------------------------------------------------------------------------
    def _after_create(self, kind: str, obj: dict) -> None:
        meta = obj["metadata"]
        if kind == "Job":
            labels = {
                "job-name": meta["name"],
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": meta["uid"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
            }
            duration = _expected_duration(obj, self.default_duration) * self._rng.uniform(0.9, 1.1)
            self._spawn_pod(obj, labels, duration)
            obj["status"] = {"active": 1}
        elif kind == "Deployment":
            replicas = (obj.get("spec") or {}).get("replicas", 1)
            for _ in range(replicas):
                self._spawn_pod(obj, {"pod-template-hash": meta["uid"][:10]}, None)
            obj["status"] = {"replicas": replicas, "observedGeneration": 1}
        elif kind == "Pod":
            obj["status"] = {"phase": "Pending"}
            duration = float(meta.get("annotations", {}).get(EXPECTED_DURATION_ANNOTATION, 0)) or None
            self._schedule[("Pod", meta["namespace"], meta["name"])] = {
                "start_at": self._t + self._rng.uniform(1, 5),
                "duration": duration,
            }

    def _spawn_pod(self, owner: dict, labels: dict, duration: float | None) -> None:
        template = (owner.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        ometa = owner["metadata"]
        suffix = "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        name = f"{ometa['name']}-{suffix}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ometa["namespace"],
                "labels": {**(tmeta.get("labels") or {}), **labels},
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": ometa["name"],
                        "uid": ometa["uid"],
                        "controller": True,
                    }
                ],
                "uid": self._uid(),
                "creationTimestamp": self._ts(),
                "generation": 1,
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        self._bump(pod)
        key = ("Pod", ometa["namespace"], name)
        self._store[key] = pod
        self._schedule[key] = {"start_at": self._t + self._rng.uniform(1, 5), "duration": duration}

    def pods_of(self, namespace: str, job_name: str) -> list[dict]:
        return self.list_owned("Pod", namespace, f"job-name={job_name}")

    # -- what a user reads of a pod (issue 21): synthetic, from the pod's real lifecycle -----------
    def _instant(self, value: str | None) -> dt.datetime | None:
        if not value:
            return None
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))

    def _pod_container(self, pod: dict, container: str | None) -> str:
        names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        ref = f"{pod['metadata']['name']}"
        if container:
            if container not in names:
                raise PermanentBackendError(
                    f"container {container} is not valid for pod {ref}", 400, "BadRequest"
                )
            return container
        if len(names) != 1:
            raise PermanentBackendError(
                f"a container name must be specified for pod {ref}, choose one of: [{' '.join(names)}]",
                400,
                "BadRequest",
            )
        return names[0]

    def pod_events(self, namespace: str, pod: str, *, limit: int = POD_EVENT_LIMIT) -> list[dict]:
        """The Events a scheduler and a kubelet would have written for this pod, made up from what the
        simulation did to it (bound when created, started at ``status.startTime``, stopped when
        deleted). Reasons and messages follow kube-scheduler ("Scheduled") and the kubelet
        (pkg/kubelet/events: Pulled, Created, Started, Killing). Marked simulated
        (``source.component`` "suanchi-simulator")."""
        with self._lock:
            live = self._store.get(("Pod", namespace, pod))
            if live is None:
                return []
            live = copy.deepcopy(live)
        meta, spec, status = live["metadata"], live.get("spec") or {}, live.get("status") or {}
        node = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname") or ""
        containers = spec.get("containers") or []
        out: list[tuple[str, str, str, str]] = []  # (at, type, reason, message)
        out.append(
            (
                meta.get("creationTimestamp", ""),
                "Normal",
                "Scheduled",
                f"Successfully assigned {namespace}/{pod} to {node or 'a simulated node'}",
            )
        )
        if status.get("startTime"):
            for c in containers:
                name = c.get("name", "")
                out += [
                    (
                        status["startTime"],
                        "Normal",
                        "Pulled",
                        f'Container image "{c.get("image", "")}" already present on machine',
                    ),
                    (status["startTime"], "Normal", "Created", f"Created container: {name}"),
                    (status["startTime"], "Normal", "Started", f"Started container {name}"),
                ]
        if meta.get("deletionTimestamp"):
            for c in containers:
                out.append(
                    (
                        meta["deletionTimestamp"],
                        "Normal",
                        "Killing",
                        f"Stopping container {c.get('name', '')}",
                    )
                )
        events = []
        for i, (at, type_, reason, message) in enumerate(out[:limit]):
            events.append(
                {
                    "metadata": {"name": f"{pod}.sim{i}", "namespace": namespace},
                    "involvedObject": {
                        "kind": "Pod",
                        "name": pod,
                        "namespace": namespace,
                        "uid": meta["uid"],
                    },
                    "type": type_,
                    "reason": reason,
                    "message": message,
                    "count": 1,
                    "firstTimestamp": at,
                    "lastTimestamp": at,
                    "source": {"component": "suanchi-simulator"},
                }
            )
        return events

    def _pod_log(self, namespace: str, pod: str, options: LogOptions) -> str:
        """Synthetic log lines, one per ``LOG_STEP_S`` simulated seconds the container ran (from
        ``startTime`` to its end or now), each marked ``[simulated]``, the exit on the last line. The
        errors follow the API server and the kubelet: 404 for a missing pod, 400 "a container name
        must be specified" / "is waiting to start" (pkg/registry/core/pod/strategy.go LogLocation,
        pkg/kubelet/kubelet_pods.go validateContainerLogStatus)."""
        with self._lock:
            live = self._store.get(("Pod", namespace, pod))
            if live is None:
                raise PermanentBackendError(f'pods "{pod}" not found', 404, "NotFound")
            live = copy.deepcopy(live)
            now = self._epoch + dt.timedelta(seconds=self._t)
        container, tail_lines, limit_bytes = options.container, options.tail_lines, options.limit_bytes
        name = self._pod_container(live, container)
        status = live.get("status") or {}
        if options.previous:
            raise PermanentBackendError(
                f'previous terminated container "{name}" in pod "{pod}" not found', 400, "BadRequest"
            )
        start = self._instant(status.get("startTime"))
        if start is None:
            raise PermanentBackendError(
                f'container "{name}" in pod "{pod}" is waiting to start: ContainerCreating',
                400,
                "BadRequest",
            )
        state = {}
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == name:
                state = cs.get("state") or {}
        terminated = state.get("terminated")
        end = self._instant((terminated or {}).get("finishedAt")) or now
        steps = max(0, int((end - start).total_seconds() // LOG_STEP_S))
        lines = []
        uid = live["metadata"].get("uid", "")
        first = max(1, steps - max(0, tail_lines) + 1)  # only the lines the tail can show are made
        for i in range(first, steps + 1):
            at = start + dt.timedelta(seconds=i * LOG_STEP_S)
            noise = (zlib.crc32(f"{uid}/{i}".encode()) % 1000) / 1000  # varies per line, reproducibly
            loss = 2.5 / (1 + i / 60) + 0.05 * noise
            lines.append(
                f"{at:%Y-%m-%dT%H:%M:%SZ} [simulated] {name}: step {i} loss={loss:.4f} "
                f"samples/s={900 + 200 * noise:.1f}"
            )
        if terminated:
            lines.append(
                f"{end:%Y-%m-%dT%H:%M:%SZ} [simulated] {name}: exited with code "
                f"{terminated.get('exitCode')} ({terminated.get('reason') or 'Completed'})"
            )
        if tail_lines >= 0:
            lines = lines[-tail_lines:] if tail_lines else []
        text = "".join(line + "\n" for line in lines)
        data = text.encode()
        if limit_bytes and len(data) > limit_bytes:  # limitBytes stops reading after that many bytes
            data = data[:limit_bytes]
        return data.decode("utf-8", errors="replace")

    def advance(self, seconds: float) -> list[tuple[str, str, str]]:
        """Move the simulated clock; returns the (namespace, pod, new phase) transitions, in order."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        transitions: list[tuple[str, str, str]] = []
        with self._lock:
            self._t += seconds
            for key in sorted(self._schedule):
                plan = self._schedule[key]
                pod = self._store.get(key)
                if pod is None:
                    continue
                phase = pod["status"].get("phase")
                if phase == "Pending" and self._t >= plan["start_at"]:
                    self._set_phase(pod, "Running", at=plan["start_at"])
                    transitions.append((key[1], key[2], "Running"))
                    phase = "Running"
                if (
                    phase == "Running"
                    and plan["duration"] is not None
                    and self._t >= plan["start_at"] + plan["duration"]
                ):
                    self._set_phase(pod, "Succeeded", exit_code=0, reason="Completed")
                    transitions.append((key[1], key[2], "Succeeded"))
        return transitions

    def inject_failure(
        self, namespace: str, name: str, reason: str = "Error", exit_code: int = 1
    ) -> list[str]:
        """Fail the pod ``name`` — or, when ``name`` is a Job/Deployment, its pods. Returns the pods failed."""
        with self._lock:
            pods = []
            if ("Pod", namespace, name) in self._store:
                pods = [self._store[("Pod", namespace, name)]]
            else:
                owner = self._store.get(("Job", namespace, name)) or self._store.get(
                    ("Deployment", namespace, name)
                )
                if owner is None:
                    raise KeyError(f"no pod, Job or Deployment {namespace}/{name}")
                uid = owner["metadata"]["uid"]
                pods = [
                    p
                    for (k, ns, _), p in self._store.items()
                    if k == "Pod" and ns == namespace and _owner_uid(p) == uid
                ]
            for pod in pods:
                self._set_phase(pod, "Failed", exit_code=exit_code, reason=reason)
            return [p["metadata"]["name"] for p in pods]

    def _set_phase(
        self, pod: dict, phase: str, exit_code: int | None = None, reason: str = "", at: float | None = None
    ) -> None:
        status = pod["status"]
        status["phase"] = phase
        now = self._ts()
        if phase == "Running":
            start = (self._epoch + dt.timedelta(seconds=at if at is not None else self._t)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            status["startTime"] = start
            state = {"running": {"startedAt": start}}
        else:
            status.setdefault("startTime", now)
            state = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": status["startTime"],
                    "finishedAt": now,
                }
            }
            if phase == "Failed":
                status["reason"] = reason
        status["containerStatuses"] = [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "ready": phase == "Running",
                "restartCount": 0,
                "state": state,
            }
            for c in (pod.get("spec") or {}).get("containers", [])
        ]
        if phase != "Running":
            self._schedule.pop(("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"]), None)
        self._bump(pod)
        self._sync_owner(pod)

    def _sync_owner(self, pod: dict) -> None:
        ns = pod["metadata"]["namespace"]
        job_name = (pod["metadata"].get("labels") or {}).get("job-name")
        job = self._store.get(("Job", ns, job_name)) if job_name else None
        if job is None:
            return
        uid = job["metadata"]["uid"]
        phases = [
            p["status"].get("phase")
            for (k, n, _), p in self._store.items()
            if k == "Pod" and n == ns and _owner_uid(p) == uid
        ]
        status = job.setdefault("status", {})
        status.update(
            active=sum(p in ("Pending", "Running") for p in phases),
            succeeded=phases.count("Succeeded"),
            failed=phases.count("Failed"),
        )
        if "Running" in phases:
            status.setdefault("startTime", self._ts())
        if status["succeeded"]:
            status["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": self._ts()}]
            status["completionTime"] = self._ts()
        elif status["failed"] > (job.get("spec") or {}).get("backoffLimit", 6):
            status["conditions"] = [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "lastTransitionTime": self._ts(),
                }
            ]
        self._bump(job)


def _merge(live: Any, desired: Any) -> Any:
    """RFC 7386 merge-patch semantics for the simulated update (dicts merge, null removes,
    everything else replaces)."""
    if isinstance(live, dict) and isinstance(desired, dict):
        out = dict(live)
        for key, value in desired.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(live.get(key), value)
        return out
    return copy.deepcopy(desired)


def _owner_uid(obj: dict) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return refs[0]["uid"] if refs else None


def _expected_duration(obj: dict, default: float) -> float:
    for meta in (
        obj.get("metadata") or {},
        ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {},
    ):
        value = (meta.get("annotations") or {}).get(EXPECTED_DURATION_ANNOTATION)
        if value is not None:
            try:
                return float(value)
            except ValueError:
                raise PermanentBackendError(
                    f"{EXPECTED_DURATION_ANNOTATION}={value!r} is not a number of seconds"
                )
    return default
