"""A fake Kubernetes API server for the test suite.

A threaded HTTP server on 127.0.0.1 (ephemeral port) that speaks the parts of the Kubernetes REST
API Suanchi uses, with real semantics, so the OFFICIAL ``kubernetes`` client can talk to it through
a generated kubeconfig (:func:`kubeconfig_for`).

Implemented
-----------
Kinds: core/v1 ``namespaces``, ``nodes`` (cluster-scoped), ``pods``, ``resourcequotas`` (namespaced);
batch/v1 ``jobs``; apps/v1 ``deployments``.

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
- delete: ``DELETE``; 200 with a ``Success`` Status (namespaces: the namespace object, marked
  ``Terminating`` and removed together with its contents at once); 404 when absent.
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

Metadata: ``uid`` (uuid4), ``resourceVersion`` (one increasing counter for the whole server),
``creationTimestamp``, ``generation`` (1 on create, +1 when ``spec`` changes on patch/replace).
Namespaces get the ``kubernetes.io/metadata.name`` label and ``status.phase: Active``.

A small controller (on by default, ``controllers=False`` to switch off): a Job gets one Pod
``<job>-<5 chars>`` (labels ``job-name``, ``batch.kubernetes.io/job-name``, ``controller-uid``, the
template's labels; ``ownerReferences``; phase ``Pending``), a Deployment gets ``spec.replicas`` Pods;
:meth:`FakeApiServer.set_pod_phase` updates the owning Job's ``status`` (``active`` / ``succeeded`` /
``failed``, ``Complete`` / ``Failed`` conditions, ``startTime`` / ``completionTime``).

Not implemented: watch, other kinds/API groups, discovery (``/api``, ``/apis``) beyond a minimal
answer, authentication/authorization, admission/defaulting, finalizers and graceful deletion,
``dryRun``, server-side apply, pagination (``limit`` / ``continue`` are ignored: everything comes in one
page), json-patch, schema validation beyond the checks listed above.

Test controls: :meth:`~FakeApiServer.set_pod_phase`, :meth:`~FakeApiServer.objects`,
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
        Resource("jobs", "Job", "batch/v1", True),
        Resource("deployments", "Deployment", "apps/v1", True),
    )
}
KIND_TO_PLURAL = {r.kind: r.plural for r in RESOURCES.values()}
GROUP_PREFIX = {"v1": "/api/v1", "batch/v1": "/apis/batch/v1", "apps/v1": "/apis/apps/v1"}

_PATH_RE = re.compile(
    r"^(?P<prefix>/api/v1|/apis/batch/v1|/apis/apps/v1)"
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


def _field_match(obj: dict, selector: str) -> bool:
    for part in (p.strip() for p in selector.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(metadata\.name|metadata\.namespace)\s*(==|!=|=)\s*(.*)", part)
        if not m:
            raise ApiError(
                400, "BadRequest", f'field label not supported: "{part.split("=")[0].rstrip("!")}"'
            )
        field, op, value = m.groups()
        actual = obj["metadata"].get(field.split(".")[1], "")
        if (actual == value) != (op != "!="):
            return False
    return True


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
                "InternalError" if fault >= 500 else "BadRequest",
                f"injected fault {fault} on {url.path}",
            )
            self._send(fault, err.status())
            return
        try:
            code, body = srv._handle(
                self.command, url.path, parse_qs(url.query), raw, self.headers.get("Content-Type", "")
            )
        except ApiError as e:
            code, body = e.code, e.status()
        except Exception as e:  # pragma: no cover - a bug in the fake server
            code, body = 500, ApiError(500, "InternalError", f"fake API server error: {e!r}").status()
        if fault == "timeout":
            # The request took effect; the answer comes too late for the client.
            time.sleep(srv.timeout_delay)
        self._send(code, body)

    def _send(self, code: int, body: dict):
        data = json.dumps(body).encode()
        try:
            self.send_response(code)
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
            self._sync_job_status(namespace, pod)
            return copy.deepcopy(pod)

    def add_node(self, name: str, labels: dict | None = None, ready: bool = True) -> dict:
        """Register a Node, as a kubelet would, with a Ready condition."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {},
            "status": {},
        }
        with self._lock:
            self._new_meta(node)
            self._bump(node)
            self._store[("nodes", "", name)] = node
        return self.set_node_ready(name, ready)

    def set_node_ready(self, name: str, ready: bool) -> dict:
        """The node controller's view: Ready True, or False with reason KubeletNotReady."""
        with self._lock:
            node = self._store.get(("nodes", "", name))
            if node is None:
                raise KeyError(f"no node {name}")
            node.setdefault("status", {})["conditions"] = [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "lastTransitionTime": _now(),
                }
            ]
            self._bump(node)
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

    def _sync_job_status(self, namespace: str, pod: dict) -> None:
        job_name = pod["metadata"].get("labels", {}).get("job-name")
        job = self._store.get(("jobs", namespace, job_name)) if job_name else None
        if job is None:
            return
        pods = [
            p
            for (pl, ns, _), p in self._store.items()
            if pl == "pods"
            and ns == namespace
            and p["metadata"].get("labels", {}).get("job-name") == job_name
        ]
        phases = [p.get("status", {}).get("phase") for p in pods]
        status = job.setdefault("status", {})
        now = _now()
        active = sum(ph in ("Pending", "Running") for ph in phases)
        succeeded = phases.count("Succeeded")
        failed = phases.count("Failed")
        status.update({"active": active, "succeeded": succeeded, "failed": failed})
        if "Running" in phases:
            status.setdefault("startTime", now)
        conditions = []
        if succeeded:
            conditions.append({"type": "Complete", "status": "True", "lastTransitionTime": now})
            status["completionTime"] = now
        elif failed and failed > job.get("spec", {}).get("backoffLimit", 6):
            conditions.append(
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": now,
                }
            )
        status["conditions"] = conditions
        self._bump(job)

    def _spawn_pods(self, owner: dict, count: int, labels: dict) -> None:
        template = owner.get("spec", {}).get("template", {})
        owner_meta = owner["metadata"]
        for _ in range(count):
            suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            name = f"{owner_meta['name']}-{suffix}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": owner_meta["namespace"],
                    "labels": {**template.get("metadata", {}).get("labels", {}), **labels},
                    "annotations": dict(template.get("metadata", {}).get("annotations", {})),
                    "ownerReferences": [
                        {
                            "apiVersion": owner["apiVersion"],
                            "kind": owner["kind"],
                            "name": owner_meta["name"],
                            "uid": owner_meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": copy.deepcopy(template.get("spec", {})),
                "status": {"phase": "Pending"},
            }
            self._new_meta(pod)
            self._store[("pods", owner_meta["namespace"], name)] = pod

    def _after_create(self, res: Resource, obj: dict) -> None:
        if not self.controllers:
            return
        meta = obj["metadata"]
        if res.plural == "jobs":
            labels = {
                "job-name": meta["name"],
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": meta["uid"],
                "batch.kubernetes.io/controller-uid": meta["uid"],
            }
            self._spawn_pods(obj, 1, labels)
            obj["status"] = {"active": 1}
        elif res.plural == "deployments":
            replicas = obj.get("spec", {}).get("replicas", 1)
            self._spawn_pods(obj, replicas, {"pod-template-hash": meta["uid"][:10]})
            obj["status"] = {"replicas": replicas, "observedGeneration": 1}

    def _handle(self, method: str, path: str, query: dict, raw: bytes, content_type: str):
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
        with self._lock:
            if name is None:
                if method == "GET":
                    return 200, self._list(res, ns, query)
                if method == "POST":
                    return 201, self._create(res, ns, body, query)
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource ({method})",
                )
            if method == "GET":
                return 200, copy.deepcopy(self._get(res, ns, name))
            if method == "DELETE":
                return 200, self._delete(res, ns, name)
            if method == "PATCH":
                return 200, self._patch(res, ns, name, body, content_type, status_only=bool(sub))
            if method == "PUT":
                return 200, self._replace(res, ns, name, body, status_only=bool(sub))
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"the server does not allow this method on the requested resource ({method})",
            )

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

    def _create(self, res: Resource, ns: str, body, query: dict) -> dict:
        obj = self._check_body(res, ns, copy.deepcopy(body))
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
        else:
            obj.pop("status", None)
        self._store[(res.plural, ns, name)] = obj
        self._after_create(res, obj)
        return copy.deepcopy(obj)

    def _delete(self, res: Resource, ns: str, name: str) -> dict:
        obj = self._get(res, ns, name)
        del self._store[(res.plural, ns, name)]
        if res.plural == "namespaces":
            for key in [k for k in self._store if k[1] == name]:
                del self._store[key]
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = _now()
            obj["status"] = {"phase": "Terminating"}
            return obj
        if res.plural == "jobs":
            pass  # pods of a deleted Job stay (propagationPolicy is not implemented: orphan)
        group = res.api_version.split("/")[0] if "/" in res.api_version else ""
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": group, "kind": res.plural, "uid": obj["metadata"]["uid"]},
        }

    def _store_update(self, res: Resource, ns: str, name: str, old: dict, new: dict) -> dict:
        meta = new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "name", "namespace", "generation"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        new["kind"], new["apiVersion"] = res.kind, res.api_version
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
        new = func(old, body)
        if not isinstance(new.get("metadata"), dict):
            raise self._invalid(res, name, "metadata", "Required value")
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
        new = self._check_body(res, ns, copy.deepcopy(body))
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
