"""A fake Kubernetes API server for the test suite.

A threaded HTTP server on 127.0.0.1 (ephemeral port) that speaks the parts of the Kubernetes REST
API Suanchi uses, with real semantics, so the OFFICIAL ``kubernetes`` client can talk to it through
a generated kubeconfig (:func:`kubeconfig_for`).

Implemented
-----------
Kinds: core/v1 ``namespaces``, ``nodes`` (cluster-scoped), ``pods``, ``resourcequotas``, ``events`` (namespaced);
batch/v1 ``jobs``; apps/v1 ``deployments``, ``daemonsets``; resource.k8s.io/v1 ``resourceslices``,
``deviceclasses`` (cluster-scoped); authorization.k8s.io/v1 ``selfsubjectaccessreviews`` (create only,
answered from :attr:`FakeApiServer.rbac_denied`); ``GET /version`` (:attr:`FakeApiServer.git_version`).

Verbs:

- list: ``GET`` on the collection (namespaced, or across all namespaces for namespaced kinds), with
  ``labelSelector`` (equality-based: ``a=b``, ``a==b``, ``a!=b``, ``a`` (exists), ``!a`` (absent),
  comma-separated = AND; set-based ``in``/``notin`` give 400) and ``fieldSelector`` on
  ``metadata.name`` / ``metadata.namespace`` (``=``, ``==``, ``!=``). Returns a ``<Kind>List`` with
  ``metadata.resourceVersion``. ``?watch=1`` / ``?watch=true`` answers 400 with a Status
  (watches are not implemented).
- get: ``GET`` on an item (and on ``.../status``).
- create: ``POST``; 409 ``AlreadyExists`` on duplicates; 404 ``NotFound`` when the namespace of a
  namespaced object does not exist; 400 ``BadRequest`` when the body is not an object of that kind or
  the namespace in the body disagrees with the path; 422 ``Invalid`` when ``metadata.name`` is
  missing / not a DNS-1123 name (``generateName`` is honoured).
- delete: ``DELETE`` with ``propagationPolicy`` (query or DeleteOptions body) and
  ``gracePeriodSeconds``: Background removes the object and the garbage collector deletes its pods;
  Foreground keeps it (``deletionTimestamp``, finalizer ``foregroundDeletion``) until they are gone;
  Orphan (the batch/v1 Job default, answered with a ``Warning`` header) strips their owner
  reference. Pods are deleted gracefully: Terminating (``deletionTimestamp``, grace 30 s), then
  Failed (exit 137) when the grace ran out, then removed (:meth:`FakeApiServer.advance`); unbound or
  finished pods go at once. Namespaces: the object, marked ``Terminating``, removed with their
  contents at once. 404 when absent.
- patch: ``PATCH`` with ``application/merge-patch+json`` (RFC 7386) or
  ``application/strategic-merge-patch+json``. The strategic merge is implemented as a JSON merge
  patch, with the difference that lists whose Go type has a merge key are merged by that key:
  ``spec.containers`` / ``initContainers`` (``name``), container ``env`` (``name``),
  ``volumes`` (``name``), ``tolerations`` are *replaced* (as in Kubernetes, they have no patch
  strategy), and node ``spec.taints`` are *replaced* (Kubernetes declares no patch strategy for
  taints either, so a strategic merge of taints replaces the list). ``$patch`` directives and
  ``application/json-patch+json`` are not implemented (415 Status).
- replace: ``PUT``; a ``metadata.resourceVersion`` in the body that is not the current one gives
  409 ``Conflict``; an absent item gives 404.
- normalisation (create, patch, replace): quantities canonical, empty ``env[].value`` dropped
  (:func:`server_normalise`); an update that changes nothing is not written (same resourceVersion).
- update validation (patch and replace): a change of an immutable field is 422 ``Invalid`` with
  ``details.causes[].field`` — a Job's ``spec.template`` / ``selector`` / ``completionMode`` /
  ``podFailurePolicy`` / ``backoffLimitPerIndex`` / ``completions`` (except an Indexed Job's
  elastic resize; a suspended, never started Job may change its template's scheduling directives),
  a Deployment's ``spec.selector``. A created Job gets its generated ``spec.selector``
  (controller-uid) and template labels, as kube-apiserver's Job strategy gives them.

Metadata: ``uid`` (uuid4), ``resourceVersion`` (one increasing counter for the whole server),
``creationTimestamp``, ``generation`` (1 on create, +1 when ``spec`` changes on patch/replace).
Namespaces get the ``kubernetes.io/metadata.name`` label and ``status.phase: Active``.

Controllers (on by default, ``controllers=False`` to switch off), run after every write and on
:meth:`~FakeApiServer.advance` (the fake's clock): the scheduler binds a pod pinned by
``kubernetes.io/hostname`` to that node (``spec.nodeName``) and DefaultTolerationSeconds adds the
300 s not-ready / unreachable tolerations; the Job controller creates ``parallelism`` pods
``<job>-<5 chars>`` (labels ``job-name``, ``batch.kubernetes.io/job-name``, ``controller-uid``, the
template's; Indexed: the completion-index annotation), keeps ``active`` / ``succeeded`` / ``failed``
/ ``terminating``, replaces failed pods within ``backoffLimit``, and sets ``FailureTarget`` →
``Failed`` or ``SuccessCriteriaMet`` → ``Complete`` (the terminal condition only once no pod is
left running); a Deployment gets a ReplicaSet per pod template (``pod-template-hash``; a template change → a new
one, the old scaled to 0 — Recreate waits for the old pods) and each ReplicaSet ``spec.replicas``
pods; :meth:`set_pod_crash_loop` shows a restarting container (CrashLoopBackOff, restartCount); the garbage collector deletes pods whose
owner is gone; the taint-eviction controller marks pods on a node with an untolerated NoExecute
taint ``DisruptionTarget`` (DeletionByTaintManager) and deletes them; :meth:`set_node_ready` adds and
removes the node lifecycle controller's not-ready / unreachable taints.

Admission: ResourceQuota (plugin/resourcequota + pkg/quota/v1/evaluator/core/pods.go): a pod create
(direct, or by the Job / Deployment controllers) that would take a namespace quota's ``pods``,
``cpu`` / ``memory`` (``requests.`` / ``limits.``) or ``requests.<extended>`` over ``hard`` is 403
Forbidden ``pods "x" is forbidden: exceeded quota: <name>, requested: …, used: …, limited: …``;
``limits.<extended>`` is accepted but never counted; ``status.hard`` / ``status.used`` are kept by
the quota controller; ``spec.hard`` is stored canonical (:func:`canonical_quantity`). A controller
whose pod was refused writes a ``FailedCreate`` Warning Event (``Error creating: <message>``) and
tries again after :attr:`FakeApiServer.create_backoff` (fake clock). Events are listed with field
selectors ``reason``, ``type``, ``involvedObject.{kind,name,namespace,uid}``.

Not implemented: watch, other kinds/API groups, discovery (``/api``, ``/apis``) beyond a minimal
answer, authentication/authorization, other admission/defaulting (beyond the tolerations above, quota
scopes and the "must specify requests" constraint), finalizers other than foregroundDeletion,
``dryRun``, server-side apply, rollout surge/availability budgets and history, pagination (``limit`` / ``continue`` are ignored: everything comes in one
page), json-patch, schema validation beyond the checks listed above.

Test controls: :meth:`~FakeApiServer.set_pod_phase`, :meth:`~FakeApiServer.set_node_ready`,
:meth:`~FakeApiServer.advance`, :meth:`~FakeApiServer.objects`,
:meth:`~FakeApiServer.inject` (fault injection), :attr:`~FakeApiServer.requests` (a log of
``(method, path)``).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import secrets
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    api_version: str
    namespaced: bool


RESOURCES = {
    r.plural: r
    for r in (
        Resource("namespaces", "Namespace", "v1", False),
        Resource("nodes", "Node", "v1", False),
        Resource("pods", "Pod", "v1", True),
        Resource("resourcequotas", "ResourceQuota", "v1", True),
        Resource("events", "Event", "v1", True),
        Resource("jobs", "Job", "batch/v1", True),
        Resource("deployments", "Deployment", "apps/v1", True),
        Resource("replicasets", "ReplicaSet", "apps/v1", True),
        Resource("daemonsets", "DaemonSet", "apps/v1", True),
        # Dynamic Resource Allocation, GA in Kubernetes 1.34 (resource.k8s.io/v1):
        # https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-slice-v1/
        Resource("resourceslices", "ResourceSlice", "resource.k8s.io/v1", False),
        Resource("deviceclasses", "DeviceClass", "resource.k8s.io/v1", False),
        # Create-only review: answered from FakeApiServer.rbac_denied, never stored.
        Resource("selfsubjectaccessreviews", "SelfSubjectAccessReview", "authorization.k8s.io/v1", False),
    )
}
KIND_TO_PLURAL = {r.kind: r.plural for r in RESOURCES.values()}
GROUP_PREFIX = {
    "v1": "/api/v1",
    "batch/v1": "/apis/batch/v1",
    "apps/v1": "/apis/apps/v1",
    "resource.k8s.io/v1": "/apis/resource.k8s.io/v1",
    "authorization.k8s.io/v1": "/apis/authorization.k8s.io/v1",
}

_PATH_RE = re.compile(
    r"^(?P<prefix>/api/v1|/apis/batch/v1|/apis/apps/v1|/apis/resource\.k8s\.io/v1|/apis/authorization\.k8s\.io/v1)"
    r"(?:/namespaces/(?P<ns>[^/]+)(?=/))?"
    r"/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?/?$"
)
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Strategic-merge keys for lists (path suffix -> merge key); other lists are replaced.
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name"}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _not_found(res: Resource, name: str) -> ApiError:
    group = res.api_version.split("/")[0] if "/" in res.api_version else ""
    qual = f"{res.plural}.{group}" if group else res.plural
    return ApiError(
        404,
        "NotFound",
        f'{qual} "{name}" not found',
        {"name": name, "group": group, "kind": res.plural},
    )


def parse_label_selector(selector: str) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e,!f`` -> [(key, op, value)], op in = != exists !exists."""
    reqs: list[tuple[str, str, str | None]] = []
    for part in (p.strip() for p in selector.split(",")):
        if not part:
            continue
        if re.search(r"\s(in|notin)\s*\(", part):
            raise ApiError(
                400,
                "BadRequest",
                f"unable to parse requirement: set-based selector {part!r} is not supported by the fake API server",
            )
        if "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append((k.strip(), "!=", v.strip()))
        elif "==" in part:
            k, v = part.split("==", 1)
            reqs.append((k.strip(), "=", v.strip()))
        elif "=" in part:
            k, v = part.split("=", 1)
            reqs.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            reqs.append((part[1:].strip(), "!exists", None))
        else:
            reqs.append((part, "exists", None))
    for key, _, _ in reqs:
        if not key or not re.fullmatch(r"[A-Za-z0-9./_-]+", key):
            raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label key {key!r}")
    return reqs


def labels_match(labels: dict, reqs) -> bool:
    for key, op, value in reqs:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


# Event field selectors (pkg/registry/core/event/strategy.go ToSelectableFields, a subset).
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.uid",
    "reason",
    "type",
)


def _field_match(obj: dict, selector: str) -> bool:
    for part in (p.strip() for p in selector.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z.]+)\s*(==|!=|=)\s*(.*)", part)
        field = m.group(1) if m else ""
        if not m or not (
            field in ("metadata.name", "metadata.namespace")
            or (obj.get("kind") == "Event" and field in _EVENT_FIELDS)
        ):
            raise ApiError(
                400, "BadRequest", f'field label not supported: "{part.split("=")[0].rstrip("!")}"'
            )
        field, op, value = m.groups()
        if field.startswith("metadata."):
            actual = obj["metadata"].get(field.split(".")[1], "")
        else:
            actual = obj
            for bit in field.split("."):
                actual = (actual or {}).get(bit, "") if isinstance(actual, dict) else ""
        if (actual == value) != (op != "!="):
            return False
    return True


# -- quantities (k8s.io/apimachinery/pkg/api/resource) -----------------------------------------------
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")


def parse_quantity(text) -> tuple[Decimal, str]:
    """A Quantity string → (value, "binary" | "decimal"); ValueError when it is not one."""
    m = _QUANTITY_RE.match(str(text).strip())
    if not m or m.group(1) in ("", ".", "+", "-"):
        raise ValueError(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    number, suffix = Decimal(m.group(1)), m.group(2)
    if suffix in _BINARY:
        return number * (1024 ** _BINARY[suffix]), "binary"
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:])), "decimal"
    return number * (Decimal(10) ** _DECIMAL[suffix]), "decimal"


def format_quantity(value: Decimal, fmt: str = "decimal") -> str:
    """Quantity.String(): the canonical form — BinarySI integers with the largest exact power of
    1024 (``1024Mi`` → ``1Gi``), everything else DecimalSI with the largest exact power of 1000
    (``1000`` → ``1k``, ``0.5`` → ``500m``, ``1000m`` → ``1``), rounded up to nano units."""
    if value == 0:
        return "0"
    if fmt == "binary" and value == value.to_integral_value() and abs(value) >= 1024:
        for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            if value % (1024**power) == 0:
                return f"{int(value // (1024**power))}{suffix}"
    if fmt == "binary" and value == value.to_integral_value():
        return str(int(value))
    nanos = (value * Decimal(10) ** 9).to_integral_value(rounding=ROUND_CEILING)
    for suffix, exp in sorted(_DECIMAL.items(), key=lambda kv: -kv[1]):
        scale = Decimal(10) ** (exp + 9)
        if nanos % scale == 0:
            return f"{int(nanos // scale)}{suffix}"
    return f"{int(nanos)}n"  # pragma: no cover - n always divides


def canonical_quantity(text) -> str:
    value, fmt = parse_quantity(text)
    return format_quantity(value, fmt)


_NATIVE_COMPUTE = ("cpu", "memory", "ephemeral-storage")


def _is_extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a domain-qualified name outside ``kubernetes.io`` that is not
    a ``requests.`` quota name (``nvidia.com/gpu``, ``huawei.com/Ascend910``)."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def pod_quota_usage(pod: dict) -> dict[str, Decimal]:
    """pkg/quota/v1/evaluator/core/pods.go PodUsageFunc: what one non-terminal pod counts against a
    ResourceQuota — ``pods`` / ``count/pods``, ``requests.cpu`` (and ``cpu``), ``limits.cpu``, the same
    for memory and ephemeral-storage, and ``requests.<extended>`` for extended resources (never
    ``limits.<extended>``: Kubernetes docs "Resource Quotas" → "Resource quota for extended
    resources"). Requests are the containers' sum or the largest init container's, whichever is
    more (resourcehelper.PodRequests); a request left out defaults to its limit (SetDefaults_Pod)."""
    spec = pod.get("spec") or {}

    def totals(containers, field: str) -> dict[str, Decimal]:
        out: dict[str, Decimal] = {}
        for c in containers or []:
            res = c.get("resources") or {}
            values = dict(res.get("limits") or {}) if field == "requests" else {}
            values.update(res.get(field) or {})
            for name, q in values.items():
                out[name] = out.get(name, Decimal(0)) + parse_quantity(q)[0]
        return out

    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for field in ("requests", "limits"):
        summed = totals(spec.get("containers"), field)
        for init in spec.get("initContainers") or []:
            for name, q in totals([init], field).items():
                summed[name] = max(summed.get(name, Decimal(0)), q)
        for name, q in summed.items():
            if name in _NATIVE_COMPUTE:
                usage[f"{field}.{name}"] = q
                if field == "requests":
                    usage[name] = q
            elif field == "requests" and _is_extended(name):
                usage[f"requests.{name}"] = q
    return usage


def _quota_counts(pod: dict) -> bool:
    """QuotaV1Pod: a Succeeded / Failed pod no longer counts."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def server_normalise(obj, key: str = ""):
    """What decoding into the Go types does to a body before it is stored: quantities under
    ``resources.limits`` / ``requests`` and a ResourceQuota's ``hard`` become canonical
    (Quantity.String), an empty ``env[].value`` disappears (EnvVar ``value,omitempty``)."""
    if isinstance(obj, dict):
        if key in ("limits", "requests", "hard"):
            out = {}
            for k, v in obj.items():
                try:
                    out[k] = canonical_quantity(v)
                except (ValueError, ArithmeticError):
                    out[k] = v  # left for validation to refuse
            return out
        return {k: server_normalise(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [server_normalise(v) for v in obj]
        if key == "env":
            items = [
                {k: v for k, v in i.items() if not (k == "value" and v == "")} if isinstance(i, dict) else i
                for i in items
            ]
        return items
    return obj


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target, patch, key: str = ""):
    """Merge patch, but lists with a known merge key are merged item by item on that key."""
    if isinstance(patch, list) and key in _MERGE_KEYS and isinstance(target, list):
        mkey = _MERGE_KEYS[key]
        result = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or mkey not in item:
                raise ApiError(
                    400, "BadRequest", f"strategic merge: item of {key} without merge key {mkey!r}"
                )
            for i, existing in enumerate(result):
                if isinstance(existing, dict) and existing.get(mkey) == item[mkey]:
                    result[i] = strategic_merge_patch(existing, item)
                    break
            else:
                result.append(copy.deepcopy(item))
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if any(k.startswith("$") for k in patch):
        raise ApiError(
            400, "BadRequest", "strategic merge: $patch directives are not supported by the fake API server"
        )
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if value is None:
            result.pop(k, None)
        else:
            result[k] = strategic_merge_patch(result.get(k), value, k)
    return result


class _Fault:
    def __init__(self, pattern: str, status, times: int, method: str | None):
        self.regex = re.compile(pattern)
        self.status = status
        self.remaining = times
        self.method = method


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: FakeApiServer

    def log_message(self, format, *args):  # noqa: A002 - silence the default stderr log
        pass

    def _dispatch(self):
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        srv.requests.append((self.command, url.path))
        fault = srv._take_fault(self.command, url.path)
        if fault == "reset":
            # Abort the connection with an RST, before anything was processed or answered.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if isinstance(fault, int):
            err = ApiError(
                fault,
                "InternalError"
                if fault >= 500
                else {409: "Conflict", 429: "TooManyRequests"}.get(fault, "BadRequest"),
                f"injected fault {fault} on {url.path}",
            )
            self._send(fault, err.status())
            return
        headers: dict[str, str] = {}
        try:
            answer = srv._handle(
                self.command, url.path, parse_qs(url.query), raw, self.headers.get("Content-Type", "")
            )
            code, body = answer[0], answer[1]
            if len(answer) > 2:
                headers = answer[2]
        except ApiError as e:
            code, body = e.code, e.status()
        except Exception as e:  # pragma: no cover - a bug in the fake server
            code, body = 500, ApiError(500, "InternalError", f"fake API server error: {e!r}").status()
        if fault == "timeout":
            # The request took effect; the answer comes too late for the client.
            time.sleep(srv.timeout_delay)
        self._send(code, body, headers)

    def _send(self, code: int, body: dict, headers: dict | None = None):
        data = json.dumps(body).encode()
        try:
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away (timeout)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch


class FakeApiServer(ThreadingHTTPServer):
    """Start with :meth:`start`, stop with :meth:`stop` (or use it as a context manager)."""

    daemon_threads = True

    def __init__(self, controllers: bool = True, timeout_delay: float = 3.0):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.controllers = controllers
        self.timeout_delay = timeout_delay
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._store: dict[tuple[str, str, str], dict] = {}
        self._rv = 1000
        self._faults: list[_Fault] = []
        self._thread: threading.Thread | None = None
        self._t = 0.0  # the fake's clock, seconds (moved by advance())
        self._terminate_at: dict[tuple[str, str, str], float] = {}  # pod key -> end of its grace
        self._taint_since: dict[tuple[str, str, str | None], float] = {}  # (node, key, value) -> t
        self._removed_failed: dict[str, int] = {}  # Job uid -> its pods removed before success
        self._create_retry_at: dict[str, float] = {}  # owner uid -> when a refused pod create is retried
        # The Job controller's backoff after a failed pod creation (pkg/controller/job
        # DefaultJobPodFailureBackOff, 10 s), on the fake's clock.
        self.create_backoff = 10.0
        # SelfSubjectAccessReview answers: (verb, group, resource) tuples that are denied.
        self.rbac_denied: set[tuple[str, str, str]] = set()
        self.git_version = "v1.34.1"

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeApiServer:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- test controls ---------------------------------------------------------------------------
    def inject(
        self, path_regex: str, status: int | str = 500, times: int = 1, method: str | None = None
    ) -> None:
        """Make the next ``times`` requests whose path matches ``path_regex`` (``re.search``; and
        ``method``, when given) fail: ``status`` an int = answer that HTTP code with a Status body,
        without processing; ``"timeout"`` = process the request, then hold the answer for
        ``timeout_delay`` seconds (longer than the client's timeout); ``"reset"`` = close the socket
        with an RST after reading the request, without processing it."""
        if not (isinstance(status, int) or status in ("timeout", "reset")):
            raise ValueError(f"status must be an HTTP code, 'timeout' or 'reset', not {status!r}")
        with self._lock:
            self._faults.append(_Fault(path_regex, status, times, method))

    def _take_fault(self, method: str, path: str):
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.regex.search(path) and fault.method in (None, method):
                    fault.remaining -= 1
                    return fault.status
        return None

    def objects(self, kind: str, namespace: str | None = None) -> list[dict]:
        """Copies of the stored objects of a kind (``Job`` or ``jobs``), sorted by namespace/name."""
        plural = KIND_TO_PLURAL.get(kind, kind)
        with self._lock:
            items = [
                copy.deepcopy(o)
                for (p, ns, _), o in sorted(self._store.items())
                if p == plural and (namespace is None or ns == namespace)
            ]
        return items

    def set_pod_phase(
        self, namespace: str, name: str, phase: str, exit_code: int | None = None, reason: str = ""
    ) -> dict:
        if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            raise ValueError(f"unknown pod phase {phase!r}")
        with self._lock:
            pod = self._store.get(("pods", namespace, name))
            if pod is None:
                raise KeyError(f"no pod {namespace}/{name}")
            now = _now()
            status = pod.setdefault("status", {})
            status["phase"] = phase
            if reason:
                status["reason"] = reason
            else:
                status.pop("reason", None)
            if phase in ("Running", "Succeeded", "Failed"):
                status.setdefault("startTime", now)
            containers = pod.get("spec", {}).get("containers", [])
            cstatuses = []
            for c in containers:
                if phase == "Running":
                    state = {"running": {"startedAt": now}}
                elif phase in ("Succeeded", "Failed"):
                    code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
                    state = {
                        "terminated": {
                            "exitCode": code,
                            "reason": reason or ("Completed" if phase == "Succeeded" else "Error"),
                            "startedAt": status["startTime"],
                            "finishedAt": now,
                        }
                    }
                else:
                    state = {"waiting": {"reason": reason or "ContainerCreating"}}
                cstatuses.append(
                    {
                        "name": c.get("name", ""),
                        "image": c.get("image", ""),
                        "ready": phase == "Running",
                        "restartCount": 0,
                        "state": state,
                    }
                )
            status["containerStatuses"] = cstatuses
            self._bump(pod)
            self._run_controllers()
            return copy.deepcopy(pod)

    def add_node(
        self,
        name: str,
        labels: dict | None = None,
        ready: bool = True,
        *,
        capacity: dict | None = None,
        allocatable: dict | None = None,
        taints: list | None = None,
    ) -> dict:
        """Register a Node, as a kubelet would, with a Ready condition. ``capacity`` /
        ``allocatable`` (quantities as strings, e.g. {"nvidia.com/gpu": "8"}; allocatable defaults
        to capacity) and ``taints`` go to ``status`` and ``spec.taints`` when given."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {},
            "status": {},
        }
        if capacity is not None:
            node["status"]["capacity"] = {k: str(v) for k, v in capacity.items()}
            node["status"]["allocatable"] = {k: str(v) for k, v in (allocatable or capacity).items()}
        if taints:
            node["spec"]["taints"] = copy.deepcopy(taints)
        with self._lock:
            self._new_meta(node)
            self._bump(node)
            self._store[("nodes", "", name)] = node
        return self.set_node_ready(name, ready)

    def set_node_ready(self, name: str, ready: bool | None) -> dict:
        """The node lifecycle controller's view (pkg/controller/nodelifecycle): Ready True; False
        (reason KubeletNotReady) with the ``node.kubernetes.io/not-ready`` taints; ``None`` = the
        kubelet stopped posting status (Ready Unknown) with the ``node.kubernetes.io/unreachable``
        taints. Each is NoSchedule + NoExecute; pods tolerate the NoExecute one 300 s by default."""
        with self._lock:
            node = self._store.get(("nodes", "", name))
            if node is None:
                raise KeyError(f"no node {name}")
            status = {True: "True", False: "False", None: "Unknown"}[ready]
            node.setdefault("status", {})["conditions"] = [
                {
                    "type": "Ready",
                    "status": status,
                    "reason": {"True": "KubeletReady", "False": "KubeletNotReady"}.get(
                        status, "NodeStatusUnknown"
                    ),
                    "lastTransitionTime": _now(),
                }
            ]
            spec = node.setdefault("spec", {})
            lifecycle = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            taints = [t for t in spec.get("taints") or [] if t.get("key") not in lifecycle]
            if ready is not True:
                key = lifecycle[0] if ready is False else lifecycle[1]
                taints += [
                    {"key": key, "effect": "NoSchedule"},
                    {"key": key, "effect": "NoExecute", "timeAdded": _now()},
                ]
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)
            self._bump(node)
            self._run_controllers()
            return copy.deepcopy(node)

    # -- internals -------------------------------------------------------------------------------
    def _bump(self, obj: dict) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _new_meta(self, obj: dict) -> None:
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        self._bump(obj)

    # -- controllers ------------------------------------------------------------------------------
    # What kube-controller-manager, kube-scheduler and the kubelet do, run synchronously after every
    # change and on :meth:`advance` (the fake's clock; real time is not used for deadlines).

    def _owned_by(self, owner_uid: str, namespace: str) -> list[tuple[tuple[str, str, str], dict]]:
        return [
            (key, p)
            for key, p in sorted(self._store.items())
            if key[0] == "pods"
            and key[1] == namespace
            and any(ref.get("uid") == owner_uid for ref in p["metadata"].get("ownerReferences") or [])
        ]

    def _schedule_pod(self, pod: dict) -> None:
        """kube-scheduler, reduced to what Suanchi uses: a pod pinned by ``nodeSelector``
        ``kubernetes.io/hostname`` (or ``nodeName``) is bound to that node when it exists. Admission
        plugin DefaultTolerationSeconds (plugin/pkg/admission/defaulttolerationseconds) adds the
        300 s tolerations of ``node.kubernetes.io/not-ready`` and ``unreachable`` (NoExecute)."""
        spec = pod.setdefault("spec", {})
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(
                t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations
            ):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
        host = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        if host and ("nodes", "", host) in self._store:
            spec["nodeName"] = host

    def _delete_pod_gracefully(self, key: tuple[str, str, str], grace: int | None = None) -> None:
        """Graceful deletion (pkg/registry/core/pod/strategy.go CheckGracefulDelete): a pod that was
        never bound to a node, or that is already Succeeded/Failed, goes at once; otherwise it gets
        ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` (``terminationGracePeriodSeconds``,
        default 30) and stays, Terminating, until the kubelet stopped it (:meth:`advance`)."""
        pod = self._store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        phase = (pod.get("status") or {}).get("phase")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        if grace == 0 or not (pod.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
            self._remove_pod(key)
            return
        pod["metadata"]["deletionTimestamp"] = _now()
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self._terminate_at[key] = self._t + grace
        self._bump(pod)

    def _remove_pod(self, key: tuple[str, str, str]) -> None:
        pod = self._store.pop(key, None)
        self._terminate_at.pop(key, None)
        if pod is None:
            return
        # Job tracking with finalizers (batch.kubernetes.io/job-tracking): a pod removed before it
        # succeeded is counted as failed by its Job.
        if (pod.get("status") or {}).get("phase") != "Succeeded":
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job":
                    self._removed_failed[ref["uid"]] = self._removed_failed.get(ref["uid"], 0) + 1

    def _kubelet_stop(self, pod: dict) -> None:
        """The kubelet killed the containers of a deleted pod: SIGKILL after the grace period, exit
        code 137; a pod with restartPolicy Never/OnFailure ends Failed (pkg/kubelet/status)."""
        now = _now()
        status = pod.setdefault("status", {})
        status["phase"] = "Failed"
        status.setdefault("startTime", now)
        status["containerStatuses"] = [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": status["startTime"],
                        "finishedAt": now,
                    }
                },
            }
            for c in (pod.get("spec") or {}).get("containers", [])
        ]
        self._bump(pod)

    @staticmethod
    def _tolerates(toleration: dict, taint: dict) -> bool:
        """k8s.io/api/core/v1 toleration.go ToleratesTaint."""
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            return False
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            return False
        if toleration.get("operator") == "Exists":
            return True
        if not toleration.get("key") and toleration.get("operator") != "Exists":
            return False
        return (toleration.get("value") or "") == (taint.get("value") or "")

    def _taint_eviction(self) -> None:
        """pkg/controller/tainteviction: a pod on a node with a NoExecute taint it does not tolerate
        gets the ``DisruptionTarget`` condition (reason DeletionByTaintManager) and is deleted; one
        that tolerates it for ``tolerationSeconds`` is deleted once that time since the taint passed."""
        for (plural, _, name), node in list(self._store.items()):
            if plural != "nodes":
                continue
            taints = [
                t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"
            ]
            seen = {(t.get("key"), t.get("value")) for t in taints}
            for tkey in [k for k in self._taint_since if k[0] == name and k[1:] not in seen]:
                del self._taint_since[tkey]
            for t in taints:
                self._taint_since.setdefault((name, t.get("key"), t.get("value")), self._t)
            if not taints:
                continue
            for key, pod in list(self._store.items()):
                if key[0] != "pods" or (pod.get("spec") or {}).get("nodeName") != name:
                    continue
                if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") in (
                    "Succeeded",
                    "Failed",
                ):
                    continue
                tolerations = (pod.get("spec") or {}).get("tolerations") or []
                evict = False
                for t in taints:
                    matching = [tol for tol in tolerations if self._tolerates(tol, t)]
                    if not matching:
                        evict = True
                        break
                    limits = [
                        tol["tolerationSeconds"]
                        for tol in matching
                        if tol.get("tolerationSeconds") is not None
                    ]
                    if len(limits) == len(matching):
                        since = self._taint_since[(name, t.get("key"), t.get("value"))]
                        if self._t >= since + max(0, min(limits)):
                            evict = True
                            break
                if evict:
                    pod["status"].setdefault("conditions", []).append(
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": "DeletionByTaintManager",
                            "message": "Taint manager: deleting due to NoExecute taint",
                            "lastTransitionTime": _now(),
                        }
                    )
                    self._bump(pod)
                    self._delete_pod_gracefully(key)

    def _garbage_collect(self) -> None:
        """pkg/controller/garbagecollector: dependents whose owner is gone are deleted (Background);
        an owner deleted with Foreground (finalizer ``foregroundDeletion``) goes once its dependents
        are gone."""
        uids = {o["metadata"]["uid"]: key for key, o in self._store.items()}
        for key, obj in list(self._store.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if not refs or any(ref.get("uid") in uids for ref in refs):
                continue
            if key[0] == "pods":
                self._delete_pod_gracefully(key)
            elif key[0] != "events":  # a ReplicaSet whose Deployment is gone; then its pods
                del self._store[key]
                self._rv += 1  # a change: the next pass collects its pods
        for key, obj in list(self._store.items()):
            meta = obj["metadata"]
            if "foregroundDeletion" in (meta.get("finalizers") or []) and not self._owned_by(
                meta["uid"], key[1]
            ):
                del self._store[key]

    def _sync_jobs(self) -> None:
        """pkg/controller/job (Kubernetes 1.31+): ``parallelism`` pods; ``succeeded`` / ``failed``
        (a pod removed before it succeeded counts as failed) / ``terminating``; more than
        ``backoffLimit`` failures → ``FailureTarget`` (reason BackoffLimitExceeded), active pods
        deleted, ``Failed`` once none is left terminating; ``completions`` successes →
        ``SuccessCriteriaMet``, then ``Complete``. A failed pod is replaced while the limit allows."""
        for key, job in list(self._store.items()):
            if key[0] != "jobs" or job["metadata"].get("deletionTimestamp"):
                continue
            spec, status = job.get("spec") or {}, job.setdefault("status", {})
            conditions = list(status.get("conditions") or [])
            types = {c["type"] for c in conditions if c.get("status") == "True"}
            if types & {"Complete", "Failed"}:
                continue
            pods = [p for _, p in self._owned_by(job["metadata"]["uid"], key[1])]
            terminating = [
                p
                for p in pods
                if p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Succeeded", "Failed")
            ]
            active = [
                p
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") in ("Pending", "Running")
            ]
            succeeded = sum(p["status"].get("phase") == "Succeeded" for p in pods)
            failed = sum(p["status"].get("phase") == "Failed" for p in pods) + self._removed_failed.get(
                job["metadata"]["uid"], 0
            )
            before = copy.deepcopy(status)
            status.update(
                active=len(active), succeeded=succeeded, failed=failed, terminating=len(terminating)
            )
            if any(p["status"].get("phase") == "Running" for p in pods):
                status.setdefault("startTime", _now())
            completions = spec.get("completions", spec.get("parallelism", 1))
            now = _now()
            if "FailureTarget" not in types and "SuccessCriteriaMet" not in types:
                if failed > spec.get("backoffLimit", 6):
                    conditions.append(
                        {
                            "type": "FailureTarget",
                            "status": "True",
                            "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit",
                            "lastTransitionTime": now,
                        }
                    )
                    types.add("FailureTarget")
                    for pkey, p in self._owned_by(job["metadata"]["uid"], key[1]):
                        if p["status"].get("phase") in ("Pending", "Running"):
                            self._delete_pod_gracefully(pkey)
                elif succeeded >= completions:
                    conditions.append(
                        {
                            "type": "SuccessCriteriaMet",
                            "status": "True",
                            "reason": "CompletionsReached",
                            "message": "Reached expected number of succeeded pods",
                            "lastTransitionTime": now,
                        }
                    )
                    types.add("SuccessCriteriaMet")
                else:
                    missing = (
                        min(spec.get("parallelism", 1), completions - succeeded)
                        - len(active)
                        - len(terminating)
                    )
                    retry_at = self._create_retry_at.get(job["metadata"]["uid"])
                    if missing > 0 and retry_at is not None:
                        if self._t >= retry_at:  # a refused creation, tried again after the backoff
                            indexes = None
                            if spec.get("completionMode") == "Indexed":
                                taken = {
                                    p["metadata"]
                                    .get("annotations", {})
                                    .get("batch.kubernetes.io/job-completion-index")
                                    for p in pods
                                }
                                indexes = [i for i in range(completions) if str(i) not in taken][:missing]
                            self._spawn_pods(
                                job,
                                len(indexes) if indexes is not None else missing,
                                self._job_pod_labels(job),
                                indexes,
                            )
                    elif missing > 0 and pods:  # replacements for failed pods (creation is _after_create's)
                        self._spawn_pods(job, missing, self._job_pod_labels(job))
            pods = [p for _, p in self._owned_by(job["metadata"]["uid"], key[1])]
            still = any(p["status"].get("phase") not in ("Succeeded", "Failed") for p in pods)
            if "FailureTarget" in types and not still:
                target = next(c for c in conditions if c["type"] == "FailureTarget")
                conditions.append({**target, "type": "Failed", "lastTransitionTime": now})
            elif "SuccessCriteriaMet" in types and not still:
                conditions.append(
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                        "lastTransitionTime": now,
                    }
                )
                status["completionTime"] = now
            status["active"] = sum(
                1
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") in ("Pending", "Running")
            )
            status["terminating"] = sum(
                1
                for p in pods
                if p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Succeeded", "Failed")
            )
            if conditions:
                status["conditions"] = conditions
            for field in ("active", "succeeded", "failed", "terminating"):  # omitempty
                if not status.get(field):
                    status.pop(field, None)
            if status != before:
                self._bump(job)

    # -- Deployments and ReplicaSets -----------------------------------------------------------------
    @staticmethod
    def _template_hash(template: dict) -> str:
        """pkg/controller/deployment/util ComputeHash: a stable hash of the pod template (FNV there,
        sha256 here), the ``pod-template-hash`` label of the ReplicaSet and its pods."""
        import hashlib

        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
        return "".join("bcdfghjklmnpqrstvwxz2456789"[int(c, 16) % 27] for c in digest[:10])

    def _live_pods(self, owner_uid: str, ns: str) -> list[tuple[tuple[str, str, str], dict]]:
        return [
            (k, p)
            for k, p in self._owned_by(owner_uid, ns)
            if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]

    def _sync_deployments(self) -> None:
        """pkg/controller/deployment: a ReplicaSet per pod template (``<deployment>-<hash>``, owned by
        the Deployment); a template change makes a new one and scales the old ones to 0 —
        ``Recreate`` scales the new one up only once every old pod is gone (recreate.go),
        ``RollingUpdate`` at once (surge and availability budgets are not modelled). A change of
        ``replicas`` alone scales the current ReplicaSet. Status: replicas, updatedReplicas,
        readyReplicas, availableReplicas (pods Running and ready), observedGeneration."""
        for key, dep in list(self._store.items()):
            if key[0] != "deployments" or dep["metadata"].get("deletionTimestamp"):
                continue
            ns, meta, spec = key[1], dep["metadata"], dep.get("spec") or {}
            template = copy.deepcopy(spec.get("template") or {})
            h = self._template_hash(template)
            owned = [
                (k, rs)
                for k, rs in sorted(self._store.items())
                if k[0] == "replicasets"
                and k[1] == ns
                and any(r.get("uid") == meta["uid"] for r in rs["metadata"].get("ownerReferences") or [])
            ]
            current = next(
                (rs for _k, rs in owned if rs["metadata"]["labels"].get("pod-template-hash") == h), None
            )
            if current is None:
                template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
                selector = copy.deepcopy(spec.get("selector") or {})
                selector.setdefault("matchLabels", {})["pod-template-hash"] = h
                name = f"{meta['name']}-{h}"
                current = {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        "labels": {**(template["metadata"].get("labels") or {})},
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "Deployment",
                                "name": meta["name"],
                                "uid": meta["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": {"replicas": 0, "selector": selector, "template": template},
                    "status": {"replicas": 0},
                }
                self._new_meta(current)
                self._store[("replicasets", ns, name)] = current
            old = [rs for _k, rs in owned if rs is not current]
            for rs in old:
                if rs["spec"].get("replicas"):
                    rs["spec"]["replicas"] = 0
                    self._bump(rs)
            recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
            old_pods = [p for rs in old for _k, p in self._owned_by(rs["metadata"]["uid"], ns)]
            want = 0 if recreate and old_pods else spec.get("replicas", 1)
            if current["spec"].get("replicas") != want:
                current["spec"]["replicas"] = want
                self._bump(current)
            pods = [p for rs in [current, *old] for _k, p in self._live_pods(rs["metadata"]["uid"], ns)]
            ready = [p for p in pods if p["status"].get("phase") == "Running"]
            updated = self._live_pods(current["metadata"]["uid"], ns)
            status = {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(pods),
                "updatedReplicas": len(updated),
                "readyReplicas": len(ready),
                "availableReplicas": len(ready),
            }
            status = {k: v for k, v in status.items() if v}  # omitempty
            if dep.get("status") != status:
                dep["status"] = status
                self._bump(dep)

    def _sync_replicasets(self) -> None:
        """pkg/controller/replicaset: keep ``spec.replicas`` live pods (not terminating, not ended);
        extra pods are deleted (gracefully) — the newest first."""
        for key, rs in list(self._store.items()):
            if key[0] != "replicasets":
                continue
            live = self._live_pods(rs["metadata"]["uid"], key[1])
            want = rs["spec"].get("replicas", 1)
            if len(live) < want:
                retry_at = self._create_retry_at.get(rs["metadata"]["uid"])
                if retry_at is None or self._t >= retry_at:
                    self._spawn_pods(rs, want - len(live), {})
            elif len(live) > want:
                newest = sorted(live, key=lambda kp: int(kp[1]["metadata"]["resourceVersion"]), reverse=True)
                for pkey, _p in newest[: len(live) - want]:
                    self._delete_pod_gracefully(pkey)
            count = len(self._live_pods(rs["metadata"]["uid"], key[1]))
            if (rs.get("status") or {}).get("replicas") != count:
                rs["status"] = {"replicas": count}
                self._bump(rs)

    def set_pod_crash_loop(self, namespace: str, name: str, restarts: int, exit_code: int = 1) -> dict:
        """The kubelet restarting a crashing container (restartPolicy Always): the pod stays
        ``Running``, its container waits in ``CrashLoopBackOff`` with ``restartCount`` and the last
        termination (pkg/kubelet/kuberuntime, "Container restart policy" in the Pod Lifecycle docs)."""
        with self._lock:
            pod = self._store.get(("pods", namespace, name))
            if pod is None:
                raise KeyError(f"no pod {namespace}/{name}")
            now = _now()
            status = pod.setdefault("status", {})
            status["phase"] = "Running"
            status.setdefault("startTime", now)
            status["containerStatuses"] = [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "ready": False,
                    "restartCount": restarts,
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": f"back-off 5m0s restarting failed container={c.get('name', '')}",
                        }
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": "Error",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
                for c in (pod.get("spec") or {}).get("containers", [])
            ]
            self._bump(pod)
            self._run_controllers()
            return copy.deepcopy(pod)

    def _run_controllers(self) -> None:
        if not self.controllers:
            return
        for _ in range(5):  # until nothing changes (each pass may enable the next)
            rv = self._rv
            self._taint_eviction()
            self._garbage_collect()
            self._sync_jobs()
            self._sync_deployments()
            self._sync_replicasets()
            self._sync_quotas()
            if self._rv == rv:
                break

    def advance(self, seconds: float = 0.0) -> None:
        """Move the fake's clock: the kubelet stops pods whose grace period ran out (they end
        Failed, still Terminating) and removes pods that are Terminating and already stopped (its
        final delete, grace 0); tolerations with ``tolerationSeconds`` expire; controllers run."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._t += seconds
            for key, pod in list(self._store.items()):
                if (
                    key[0] == "pods"
                    and pod["metadata"].get("deletionTimestamp")
                    and pod["status"].get("phase") in ("Succeeded", "Failed")
                ):
                    self._remove_pod(key)
            for key, due in sorted(self._terminate_at.items()):
                pod = self._store.get(key)
                if (
                    pod is not None
                    and self._t >= due
                    and pod["status"].get("phase") not in ("Succeeded", "Failed")
                ):
                    self._kubelet_stop(pod)
            self._run_controllers()

    def _job_pod_labels(self, job: dict) -> dict:
        meta = job["metadata"]
        return {
            "job-name": meta["name"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
        }

    def _spawn_pods(self, owner: dict, count: int, labels: dict, indexes: list[int] | None = None) -> int:
        """Create ``count`` pods from the owner's template through admission; returns how many were
        created. A refused pod (e.g. 403 exceeded quota) is a ``FailedCreate`` Warning event on the
        owner — ``Error creating: <the API's message>`` (pkg/controller/controller_utils.go
        CreatePods) — and the controller tries again after its backoff (:attr:`create_backoff`)."""
        template = owner.get("spec", {}).get("template", {})
        created = 0
        owner_meta = owner["metadata"]
        for i in range(count):
            suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            name = f"{owner_meta['name']}-{suffix}"
            annotations = dict(template.get("metadata", {}).get("annotations", {}))
            pod_labels = {**template.get("metadata", {}).get("labels", {}), **labels}
            if indexes is not None:
                # pkg/controller/job/indexed_job_utils.go: the completion index annotation and label.
                annotations["batch.kubernetes.io/job-completion-index"] = str(indexes[i])
                pod_labels["batch.kubernetes.io/job-completion-index"] = str(indexes[i])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": owner_meta["namespace"],
                    "labels": pod_labels,
                    "annotations": annotations,
                    "ownerReferences": [
                        {
                            "apiVersion": owner["apiVersion"],
                            "kind": owner["kind"],
                            "name": owner_meta["name"],
                            "uid": owner_meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": copy.deepcopy(template.get("spec", {})),
                "status": {"phase": "Pending"},
            }
            try:
                self._admit_pod(pod)
            except ApiError as e:
                self._record_event(
                    owner,
                    "FailedCreate",
                    f"Error creating: {e.message}",
                    "job-controller" if owner["kind"] == "Job" else "replicaset-controller",
                )
                self._create_retry_at[owner_meta["uid"]] = self._t + self.create_backoff
                return created
            self._new_meta(pod)
            self._schedule_pod(pod)
            self._store[("pods", owner_meta["namespace"], name)] = pod
            created += 1
        self._create_retry_at.pop(owner_meta["uid"], None)
        return created

    def _after_create(self, res: Resource, obj: dict) -> None:
        if res.plural == "pods":
            self._schedule_pod(obj)
        if not self.controllers:
            return
        if res.plural == "jobs":
            spec = obj.get("spec") or {}
            count = min(spec.get("parallelism", 1), spec.get("completions", spec.get("parallelism", 1)))
            indexes = list(range(count)) if spec.get("completionMode") == "Indexed" else None
            created = self._spawn_pods(obj, count, self._job_pod_labels(obj), indexes)
            obj["status"] = {"active": created} if created else {}

    def _handle(self, method: str, path: str, query: dict, raw: bytes, content_type: str):
        if (
            path.rstrip("/") == "/version"
        ):  # the client asks for /version/; https://kubernetes.io/docs/reference/using-api/ (version.Info)
            major, minor = self.git_version.lstrip("v").split(".")[:2]
            return 200, {
                "major": major,
                "minor": minor,
                "gitVersion": self.git_version,
                "platform": "linux/amd64",
            }
        if path in ("/api", "/apis", "/version"):
            return 200, {"kind": "APIVersions", "versions": ["v1"]} if path == "/api" else {}
        m = _PATH_RE.match(path)
        if not m:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        prefix, ns, plural, name, sub = m.group("prefix", "ns", "plural", "name", "sub")
        res = RESOURCES.get(plural)
        if res is None or GROUP_PREFIX[res.api_version] != prefix:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        if ns is not None and not res.namespaced:
            raise ApiError(404, "NotFound", f"{res.plural} is not namespaced")
        if res.namespaced and name is not None and ns is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        ns = ns or ""
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as e:
                raise ApiError(400, "BadRequest", f"the body of the request was in an unknown format: {e}")
        if res.plural == "selfsubjectaccessreviews":
            return self._access_review(method, name, body)
        with self._lock:
            if name is None:
                if method == "GET":
                    return 200, self._list(res, ns, query)
                if method == "POST":
                    created = self._create(res, ns, body, query)
                    self._run_controllers()
                    return 201, created
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource ({method})",
                )
            if method == "GET":
                return 200, copy.deepcopy(self._get(res, ns, name))
            if method == "DELETE":
                return self._delete(res, ns, name, query, body)
            if method == "PATCH":
                patched = self._patch(res, ns, name, body, content_type, status_only=bool(sub))
                self._run_controllers()
                return 200, patched
            if method == "PUT":
                replaced = self._replace(res, ns, name, body, status_only=bool(sub))
                self._run_controllers()
                return 200, replaced
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"the server does not allow this method on the requested resource ({method})",
            )

    def _access_review(self, method: str, name: str | None, body) -> tuple[int, dict]:
        """POST a SelfSubjectAccessReview: status.allowed unless (verb, group, resource) is in
        ``rbac_denied`` (https://kubernetes.io/docs/reference/access-authn-authz/authorization/
        #checking-api-access)."""
        if method != "POST" or name is not None:
            raise ApiError(405, "MethodNotAllowed", "selfsubjectaccessreviews only support create")
        attrs = ((body or {}).get("spec") or {}).get("resourceAttributes")
        if not isinstance(attrs, dict) or not attrs.get("verb"):
            raise ApiError(400, "BadRequest", "spec.resourceAttributes.verb is required")
        key = (attrs.get("verb", ""), attrs.get("group", ""), attrs.get("resource", ""))
        allowed = key not in self.rbac_denied
        review = copy.deepcopy(body)
        review.update(apiVersion="authorization.k8s.io/v1", kind="SelfSubjectAccessReview")
        review.setdefault("metadata", {})
        review["status"] = {"allowed": allowed}
        if not allowed:
            review["status"]["reason"] = "denied by the fake API server's rbac_denied"
        return 201, review

    def add_resource_slice(
        self, name: str, node: str, driver: str, devices: list[dict], pool: str | None = None
    ) -> dict:
        """Publish a ResourceSlice as a DRA driver's kubelet plugin would (spec.driver, nodeName,
        pool {name, generation, resourceSliceCount}, devices [{name, attributes, capacity}])."""
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
                "devices": copy.deepcopy(devices),
            },
        }
        with self._lock:
            self._new_meta(obj)
            self._bump(obj)
            self._store[("resourceslices", "", name)] = obj
            return copy.deepcopy(obj)

    def _get(self, res: Resource, ns: str, name: str) -> dict:
        obj = self._store.get((res.plural, ns, name))
        if obj is None:
            raise _not_found(res, name)
        return obj

    def _list(self, res: Resource, ns: str, query: dict) -> dict:
        if query.get("watch", ["false"])[0] in ("1", "true", "True"):
            raise ApiError(400, "BadRequest", "watch is not implemented by the fake API server; list instead")
        reqs = parse_label_selector(query.get("labelSelector", [""])[0])
        fsel = query.get("fieldSelector", [""])[0]
        items = [
            copy.deepcopy(o)
            for (p, ons, _), o in sorted(self._store.items())
            if p == res.plural
            and (not ns or ons == ns)
            and labels_match(o["metadata"].get("labels") or {}, reqs)
            and _field_match(o, fsel)
        ]
        return {
            "apiVersion": res.api_version,
            "kind": f"{res.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _check_body(self, res: Resource, ns: str, body) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", f"the body of the request must be a {res.kind} object")
        if (
            body.get("kind", res.kind) != res.kind
            or body.get("apiVersion", res.api_version) != res.api_version
        ):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) / kind ({body.get('kind')}) does not match "
                f"the expected {res.api_version} {res.kind}",
            )
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        body["kind"], body["apiVersion"] = res.kind, res.api_version
        return body

    def _invalid(self, res: Resource, name: str, field: str, message: str) -> ApiError:
        return ApiError(
            422,
            "Invalid",
            f'{res.kind} "{name}" is invalid: {field}: {message}',
            {
                "name": name,
                "kind": res.kind,
                "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}],
            },
        )

    # -- update validation: immutable fields ------------------------------------------------------
    # What the registries' ValidateUpdate refuses (ValidateImmutableField: field.Invalid(path, new
    # value, "field is immutable")). batch/v1 Job: pkg/apis/batch/validation/validation.go
    # ValidateJobSpecUpdate — spec.selector, spec.template (validatePodTemplateUpdate: only a Job that
    # is suspended and never started may change the template's scheduling directives),
    # spec.completionMode, spec.podFailurePolicy, spec.backoffLimitPerIndex, and spec.completions
    # (validateCompletions: only an Indexed Job may change it, together with parallelism — "elastic
    # Indexed Jobs"). apps/v1 Deployment: pkg/apis/apps/validation/validation.go
    # ValidateDeploymentUpdate — spec.selector.
    _JOB_IMMUTABLE = ("selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex")
    _SCHEDULING_DIRECTIVES = ("nodeSelector", "affinity", "tolerations", "schedulingGates")

    def _immutable_errors(self, res: Resource, old: dict, new: dict) -> list[str]:
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        fields: list[str] = []
        if res.plural == "deployments":
            if new_spec.get("selector") != old_spec.get("selector"):
                fields.append("selector")
            return fields
        if res.plural != "jobs":
            return fields
        for key in self._JOB_IMMUTABLE:
            if new_spec.get(key) != old_spec.get(key):
                fields.append(key)
        if new_spec.get("completions") != old_spec.get("completions") and not (
            new_spec.get("completionMode") == "Indexed"
            and new_spec.get("completions") == new_spec.get("parallelism")
        ):
            fields.append("completions")
        old_t, new_t = copy.deepcopy(old_spec.get("template")), copy.deepcopy(new_spec.get("template"))
        suspended_never_started = old_spec.get("suspend") is True and not (old.get("status") or {}).get(
            "startTime"
        )
        if suspended_never_started:  # AllowMutableSchedulingDirectives
            for tpl in (old_t, new_t):
                if isinstance(tpl, dict):
                    (tpl.get("metadata") or {}).pop("labels", None)
                    (tpl.get("metadata") or {}).pop("annotations", None)
                    for key in self._SCHEDULING_DIRECTIVES:
                        (tpl.get("spec") or {}).pop(key, None)
        if new_t != old_t:
            fields.append("template")
        return sorted(fields)

    def _validate_update(self, res: Resource, name: str, old: dict, new: dict) -> None:
        """422 Invalid, as kube-apiserver answers (apimachinery errors.NewInvalid): message
        ``Job.batch "x" is invalid: spec.template: Invalid value: …: field is immutable`` (several
        errors in ``[…, …]``), ``details.causes[]`` {reason FieldValueInvalid, message, field}."""
        fields = self._immutable_errors(res, old, new)
        if not fields:
            return
        group = res.api_version.split("/")[0] if "/" in res.api_version else ""
        qualified = f"{res.kind}.{group}" if group else res.kind
        causes = []
        for f in fields:
            value = json.dumps((new.get("spec") or {}).get(f), sort_keys=True)
            if len(value) > 120:
                value = value[:117] + "..."
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {value}: field is immutable",
                    "field": f"spec.{f}",
                }
            )
        text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        raise ApiError(
            422,
            "Invalid",
            f'{qualified} "{name}" is invalid: ' + (text if len(causes) == 1 else f"[{text}]"),
            {"name": name, "group": group, "kind": res.kind, "causes": causes},
        )

    # -- ResourceQuota admission (staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota) ---
    def _validate_quota(self, quota: dict) -> None:
        """pkg/apis/core/validation ValidateResourceQuota: every ``spec.hard`` value is a Quantity;
        kube-apiserver stores it canonicalised (``1000m`` → ``1``, ``1024Mi`` → ``1Gi``)."""
        hard = (quota.get("spec") or {}).get("hard") or {}
        name = quota["metadata"].get("name", "")
        for key, value in list(hard.items()):
            try:
                hard[key] = canonical_quantity(value)
            except (ValueError, ArithmeticError):
                raise self._invalid(
                    RESOURCES["resourcequotas"],
                    name,
                    f"spec.hard[{key}]",
                    f"Invalid value: {json.dumps(value)}: quantities must be numbers with a unit",
                ) from None

    def _quota_used(self, namespace: str, skip: tuple | None = None) -> dict[str, Decimal]:
        used: dict[str, Decimal] = {}
        for key, pod in self._store.items():
            if key[0] == "pods" and key[1] == namespace and key != skip and _quota_counts(pod):
                for name, q in pod_quota_usage(pod).items():
                    used[name] = used.get(name, Decimal(0)) + q
        return used

    def _admit_pod(self, pod: dict) -> None:
        """The ResourceQuota admission plugin's checkRequest (controller.go): for each quota of the
        namespace that constrains something the pod requests, used + requested must stay within
        hard, else 403 Forbidden ``pods "x" is forbidden: exceeded quota: <name>, requested: …,
        used: …, limited: …`` (only the exceeded resources, sorted, ``name=quantity``). Not
        implemented: the "must specify requests/limits" constraint, scopes and scope selectors."""
        meta = pod["metadata"]
        ns = meta.get("namespace", "")
        requested = pod_quota_usage(pod)
        used = None
        for (plural, qns, qname), quota in sorted(self._store.items()):
            if plural != "resourcequotas" or qns != ns:
                continue
            hard = {k: parse_quantity(v)[0] for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()}
            restricted = sorted(set(hard) & set(requested))
            if not restricted:
                continue
            if used is None:
                used = self._quota_used(ns, skip=("pods", ns, meta.get("name", "")))
            failed = [r for r in restricted if used.get(r, Decimal(0)) + requested[r] > hard[r]]
            if failed:

                def show(values: dict, failed: list[str] = failed) -> str:
                    return ",".join(
                        f"{r}={format_quantity(values.get(r, Decimal(0)), 'binary' if 'memory' in r or 'storage' in r else 'decimal')}"
                        for r in failed
                    )

                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{meta.get("name", "")}" is forbidden: exceeded quota: {qname}, requested: {show(requested)}, '
                    f"used: {show(used)}, limited: {show(hard)}",
                    {"name": meta.get("name", ""), "kind": "pods"},
                )

    def _sync_quotas(self) -> None:
        """pkg/controller/resourcequota: ``status.hard`` = ``spec.hard``, ``status.used`` = what the
        namespace's non-terminal pods count against each constrained resource."""
        for (plural, ns, _name), quota in list(self._store.items()):
            if plural != "resourcequotas":
                continue
            hard = dict((quota.get("spec") or {}).get("hard") or {})
            used_all = self._quota_used(ns)
            used = {
                k: format_quantity(used_all.get(k, Decimal(0)), parse_quantity(v)[1]) for k, v in hard.items()
            }
            status = {"hard": hard, "used": used}
            if quota.get("status") != status:
                quota["status"] = status
                self._bump(quota)

    def _record_event(
        self, owner: dict, reason: str, message: str, component: str, type_: str = "Warning"
    ) -> None:
        """A core/v1 Event on ``owner`` as client-go's EventRecorder writes it (name
        ``<object>.<hex>``; a repeat of the same reason and message bumps ``count`` and
        ``lastTimestamp``, as the event correlator's aggregation does)."""
        meta = owner["metadata"]
        ns = meta.get("namespace", "")
        for (plural, ens, _), ev in self._store.items():
            inv = ev.get("involvedObject") or {}
            if (
                plural == "events"
                and ens == ns
                and inv.get("uid") == meta["uid"]
                and ev.get("reason") == reason
                and ev.get("message") == message
            ):
                ev["count"] = ev.get("count", 1) + 1
                ev["lastTimestamp"] = _now()
                self._bump(ev)
                return
        name = f"{meta['name']}.{secrets.token_hex(8)}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "apiVersion": owner.get("apiVersion", ""),
                "kind": owner.get("kind", ""),
                "name": meta["name"],
                "namespace": ns,
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "source": {"component": component},
            "reportingComponent": component,
        }
        self._new_meta(event)
        self._store[("events", ns, name)] = event

    def _default_job(self, obj: dict) -> None:
        """pkg/registry/batch/job/strategy.go PrepareForCreate → generateSelector: unless
        ``manualSelector``, the Job gets ``spec.selector`` {matchLabels: controller-uid} and its pod
        template the controller-uid and job-name labels (both plain and ``batch.kubernetes.io/``)."""
        spec = obj.setdefault("spec", {})
        if spec.get("manualSelector") is True:
            return
        meta = obj["metadata"]
        labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": meta["uid"],
                "controller-uid": meta["uid"],
                "batch.kubernetes.io/job-name": meta["name"],
                "job-name": meta["name"],
            }
        )
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}

    def _create(self, res: Resource, ns: str, body, query: dict) -> dict:
        obj = self._check_body(res, ns, server_normalise(copy.deepcopy(body)))
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        name = meta.get("name") or ""
        if not name:
            raise self._invalid(
                res, name, "metadata.name", "Required value: name or generateName is required"
            )
        if not _DNS1123.match(name) or len(name) > 253:
            raise self._invalid(
                res,
                name,
                "metadata.name",
                f"Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
            )
        if res.namespaced and ("namespaces", "", ns) not in self._store:
            raise _not_found(RESOURCES["namespaces"], ns)
        if (res.plural, ns, name) in self._store:
            group = res.api_version.split("/")[0] if "/" in res.api_version else ""
            qual = f"{res.plural}.{group}" if group else res.plural
            raise ApiError(
                409,
                "AlreadyExists",
                f'{qual} "{name}" already exists',
                {"name": name, "group": group, "kind": res.plural},
            )
        for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(key, None)
        self._new_meta(obj)
        if res.plural == "namespaces":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        elif res.plural == "pods":
            obj["status"] = {"phase": "Pending"}
            self._admit_pod(obj)
        else:
            obj.pop("status", None)
        if res.plural == "jobs":
            self._default_job(obj)
        if res.plural == "resourcequotas":
            self._validate_quota(obj)
        self._store[(res.plural, ns, name)] = obj
        self._after_create(res, obj)
        return copy.deepcopy(obj)

    def _delete(self, res: Resource, ns: str, name: str, query: dict, body) -> tuple:
        """DELETE with ``propagationPolicy`` (query or DeleteOptions body) and ``gracePeriodSeconds``.

        Without a policy each kind uses its registry's DefaultGarbageCollectionPolicy: batch/v1 Jobs
        orphan their pods, with a Warning header (pkg/registry/batch/job/strategy.go), everything else
        deletes dependents in the background. Orphan removes the owner reference from the pods;
        Background removes the object now and the garbage collector deletes the pods gracefully;
        Foreground keeps the object (``deletionTimestamp``, finalizer ``foregroundDeletion``) until its
        pods are gone. A pod itself is deleted gracefully (see ``_delete_pod_gracefully``)."""
        obj = self._get(res, ns, name)
        options = body if isinstance(body, dict) else {}
        policy = query.get("propagationPolicy", [None])[0] or options.get("propagationPolicy")
        if options.get("orphanDependents") is True and not policy:
            policy = "Orphan"
        grace = query.get("gracePeriodSeconds", [None])[0]
        grace = options.get("gracePeriodSeconds") if grace is None else int(grace)
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "{policy}": '
                'supported values: "Foreground", "Background", "Orphan"',
            )
        headers: dict[str, str] = {}
        if policy is None and res.plural == "jobs":
            policy = "Orphan"
            headers["Warning"] = (
                '299 - "child pods are preserved by default when jobs are deleted; set '
                "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
                'suppress this warning"'
            )
        policy = policy or "Background"
        if res.plural == "namespaces":
            del self._store[(res.plural, ns, name)]
            for key in [k for k in self._store if k[1] == name]:
                del self._store[key]
                self._terminate_at.pop(key, None)
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = _now()
            obj["status"] = {"phase": "Terminating"}
            return 200, obj, headers
        if res.plural == "pods":
            self._delete_pod_gracefully((res.plural, ns, name), grace)
            self._run_controllers()
            live = self._store.get((res.plural, ns, name))
            if live is not None:  # graceful: the pod is returned, Terminating
                return 200, copy.deepcopy(live), headers
        elif policy == "Foreground":
            meta = obj["metadata"]
            meta.setdefault("deletionTimestamp", _now())
            if "foregroundDeletion" not in (meta.get("finalizers") or []):
                meta.setdefault("finalizers", []).append("foregroundDeletion")
            self._bump(obj)
            for key, _pod in self._owned_by(meta["uid"], ns):
                self._delete_pod_gracefully(key, grace)
            self._run_controllers()
            if (res.plural, ns, name) in self._store:
                return 200, copy.deepcopy(obj), headers
        else:
            del self._store[(res.plural, ns, name)]
            if policy == "Orphan":
                for _key, pod in self._owned_by(obj["metadata"]["uid"], ns):
                    pod["metadata"]["ownerReferences"] = [
                        r
                        for r in pod["metadata"]["ownerReferences"]
                        if r.get("uid") != obj["metadata"]["uid"]
                    ]
                    self._bump(pod)
            self._run_controllers()
        group = res.api_version.split("/")[0] if "/" in res.api_version else ""
        return (
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": group, "kind": res.plural, "uid": obj["metadata"]["uid"]},
            },
            headers,
        )

    def _store_update(self, res: Resource, ns: str, name: str, old: dict, new: dict) -> dict:
        meta = new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "name", "namespace", "generation"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        meta["resourceVersion"] = old["metadata"].get("resourceVersion")
        if new == old:
            # A no-op update is not written: same resourceVersion, no watch event
            # (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go GuaranteedUpdate).
            return copy.deepcopy(old)
        if new.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        self._bump(new)
        self._store[(res.plural, ns, name)] = new
        return copy.deepcopy(new)

    def _patch(self, res: Resource, ns: str, name: str, body, content_type: str, status_only: bool) -> dict:
        old = self._get(res, ns, name)
        ctype = content_type.split(";")[0].strip()
        if ctype == "application/merge-patch+json":
            func = merge_patch
        elif ctype == "application/strategic-merge-patch+json":
            func = strategic_merge_patch
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {ctype!r})",
            )
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(res, name)
        if status_only:
            body = {"status": body.get("status")}
        new = server_normalise(func(old, body))
        if not isinstance(new.get("metadata"), dict):
            raise self._invalid(res, name, "metadata", "Required value")
        if not status_only:
            self._validate_update(res, name, old, new)
            if res.plural == "resourcequotas":
                self._validate_quota(new)
        return self._store_update(res, ns, name, old, new)

    def _conflict(self, res: Resource, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            {"name": name, "kind": res.plural},
        )

    def _replace(self, res: Resource, ns: str, name: str, body, status_only: bool) -> dict:
        old = self._get(res, ns, name)
        new = self._check_body(res, ns, server_normalise(copy.deepcopy(body)))
        if new["metadata"].get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        rv = new["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(res, name)
        if status_only:
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status", {})
            new = merged
        elif "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        if not status_only:
            self._validate_update(res, name, old, new)
        return self._store_update(res, ns, name, old, new)


def kubeconfig_for(server: FakeApiServer, directory: Path | None = None, context: str = "fake") -> Path:
    """Write a kubeconfig (no auth, plain http) pointing at ``server``; returns its path.

    Written under ``directory`` when given, else a fresh temporary directory."""
    import tempfile

    directory = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="fake-kube-"))
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server.url}}],
        "users": [{"name": f"{context}-user", "user": {}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": f"{context}-user", "namespace": "default"},
            }
        ],
        "current-context": context,
        "preferences": {},
    }
    path = directory / f"kubeconfig-{server.port}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
