"""A fake Kubernetes API server for the test suite.

A threaded HTTP server on 127.0.0.1 (ephemeral port) that speaks the parts of the Kubernetes REST
API Suanchi uses, with real semantics, so the OFFICIAL ``kubernetes`` client can talk to it through
a generated kubeconfig (:func:`kubeconfig_for`).

Implemented
-----------
Kinds: core/v1 ``namespaces``, ``nodes`` (cluster-scoped), ``pods``, ``resourcequotas``, ``events`` (namespaced);
batch/v1 ``jobs``; apps/v1 ``deployments``, ``daemonsets``; resource.k8s.io/v1 ``resourceslices``,
``deviceclasses`` (cluster-scoped), ``resourceclaims``, ``resourceclaimtemplates``; authorization.k8s.io/v1 ``selfsubjectaccessreviews`` (create only,
answered from :attr:`FakeApiServer.rbac_denied`); ``GET /version`` (:attr:`FakeApiServer.git_version`).

Verbs:

- list: ``GET`` on the collection (namespaced, or across all namespaces for namespaced kinds), with
  ``labelSelector`` (``a=b``, ``a==b``, ``a!=b``, ``a`` (exists), ``!a`` (absent), set-based
  ``a in (x,y)`` / ``a notin (x,y)``, comma-separated = AND; bad keys/values 400) and
  ``fieldSelector`` on ``metadata.name`` / ``metadata.namespace`` (``=``, ``==``, ``!=``). Returns a
  ``<Kind>List`` with ``metadata.resourceVersion`` whose items carry no ``kind`` / ``apiVersion``;
  ``limit`` / ``continue`` paging from a consistent snapshot, 410 Expired for a token older than
  :meth:`~FakeApiServer.compact`.
- watch: ``GET`` on the collection with ``watch=true`` / ``watch=1`` (every listed kind), as
  https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes and
  #semantics-for-watch define: a chunked stream (HTTP/1.1 ``Transfer-Encoding: chunked``) of JSON
  lines ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`` in resourceVersion order.
  ``resourceVersion`` N: every change after N, replayed from a bounded history (the apiserver's watch
  cache, :attr:`~FakeApiServer.watch_history_size` events; :meth:`~FakeApiServer.compact` empties it),
  a version older than the history answers one ERROR event with a 410 Expired Status (``too old
  resource version: N (M)``) and ends; unset or ``"0"``: synthetic ADDED events for every object at
  the current version, then the changes. ``labelSelector`` / ``fieldSelector`` filter the objects;
  an object that stops matching arrives as DELETED (its previous state), one that starts as ADDED.
  ``timeoutSeconds`` ends the stream; ``allowWatchBookmarks=true`` adds BOOKMARK events (only
  ``kind``, ``apiVersion`` and ``metadata.resourceVersion``) when the real watch cache sends them:
  none after the replay, one 2 s before the deadline, else once a minute (see
  :func:`next_bookmark_time`). ``sendInitialEvents`` is not implemented (400).
  :attr:`~FakeApiServer.header_delay_s` holds back the response headers of lists and watches.
- get: ``GET`` on an item (and on ``.../status``).
- create: ``POST``; 409 ``AlreadyExists`` on duplicates; 404 ``NotFound`` when the namespace of a
  namespaced object does not exist, 403 when it is Terminating (NamespaceLifecycle); 400
  ``BadRequest`` when the body is not an object of that kind or the namespace in the body disagrees
  with the path; 422 ``Invalid`` with ``details.causes`` (see :meth:`FakeApiServer._validate`):
  names (DNS-1123 subdomain, label for Namespaces), label keys/values, a Job's template labels (so a
  Job name over 63 characters), ``restartPolicy`` (OnFailure/Never for Jobs), container resources
  (extended resources integers with requests == limits), unique taint key+effect on Nodes, pod DRA
  claim references, and resource.k8s.io/v1 claims, templates, classes and slices (CEL selectors
  compiled by the fake's subset, see :func:`cel_compile`). Defaults: ``restartPolicy: Always``,
  pod requests from limits, DRA ``allocationMode: ExactCount`` / ``count: 1``. Error texts name
  the group as kube-apiserver does (``Job.batch "x" is invalid``, ``jobs.batch "x" not found``).
- delete: ``DELETE`` with ``propagationPolicy`` (query or DeleteOptions body) and
  ``gracePeriodSeconds``: Background removes the object and the garbage collector deletes its pods;
  Foreground keeps it (``deletionTimestamp``, finalizer ``foregroundDeletion``) until they are gone;
  Orphan (the batch/v1 Job default, answered with a ``Warning`` header) strips their owner
  reference. Pods are deleted gracefully: Terminating (``deletionTimestamp``, grace 30 s), then
  Failed (exit 137) when the grace ran out, then removed (:meth:`FakeApiServer.advance`); unbound or
  finished pods go at once (the answer is the Pod). Namespaces: ``deletionTimestamp`` and
  ``status.phase: Terminating`` while the namespace controller deletes the content (pods
  gracefully), then gone (at once without controllers). A ResourceClaim in use keeps
  ``deletionTimestamp`` (delete-protection finalizer) until no pod holds it. 404 when absent.
- patch: ``PATCH`` with ``application/merge-patch+json`` (RFC 7386) or
  ``application/strategic-merge-patch+json``. The strategic merge is implemented as a JSON merge
  patch, with the difference that lists whose Go type has a merge key are merged by that key:
  ``spec.containers`` / ``initContainers`` (``name``), container ``env`` (``name``),
  ``volumes`` (``name``), ``tolerations`` are *replaced* (as in Kubernetes, they have no patch
  strategy), and node ``spec.taints`` are *replaced* (Kubernetes declares no patch strategy for
  taints either, so a strategic merge of taints replaces the list). ``$patch`` directives and
  ``application/json-patch+json`` are not implemented (415 Status).
- server-side apply: ``PATCH`` with ``application/apply-patch+yaml`` (see :meth:`FakeApiServer._apply`):
  create when absent, ``metadata.managedFields`` per manager, 409 on a conflict, ``force=true``.
- discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>`` list
  exactly the kinds above (:func:`discovery_document`), enough for the real kubectl.
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
removes the node lifecycle controller's not-ready / unreachable taints. DRA: the resourceclaim
controller generates ``<pod>-<claim>-<5 chars>`` claims from a pod's ``resourceClaimTemplateName``
(owned by the pod, ``status.resourceClaimStatuses``), un-reserves and deallocates claims of pods gone
or done and deletes their generated claims; the scheduler's DynamicResources plugin allocates
devices from ResourceSlices (the highest ``pool.generation`` of each pool only; DeviceClass and
request CEL selectors, ExactCount / All,
``firstAvailable``, never a device held by another claim, KEP-4815 partitionable devices: a device
that ``consumesCounters`` only while its pool's ``sharedCounters`` have enough left, see
:func:`_counters_fit`), writes ``status.allocation`` /
``reservedFor`` and binds the pod to the node, or leaves it Pending (PodScheduled False
Unschedulable, a ``FailedScheduling`` event). The NVIDIA DRA driver's NodePrepareResources check of
a claim's opaque ``GpuConfig`` / ``MigDeviceConfig`` sharing strategy against its feature gates, only
when a test sets :attr:`FakeApiServer.nvidia_dra_feature_gates` (read from the driver's source, not
run: see :meth:`FakeApiServer._nvidia_prepare_error`): a refused pod stays Pending in
ContainerCreating with the kubelet's ``FailedPrepareDynamicResources`` event. A pod without claims
is bound to its ``nodeSelector`` host only when the node's ``status.allocatable`` covers the extended resources it
requests (kube-scheduler's NodeResourcesFit; a name the node does not advertise is 0), else it stays
Pending the same way ("0/N nodes are available: 1 Insufficient <name>") and is retried on every
change; ``ignored_by_scheduler`` names what an extender such as HAMi's takes over.

Admission: ResourceQuota (plugin/resourcequota + pkg/quota/v1/evaluator/core/pods.go): a pod create
(direct, or by the Job / Deployment controllers) that would take a namespace quota's ``pods``,
``cpu`` / ``memory`` (``requests.`` / ``limits.``) or ``requests.<extended>`` over ``hard`` is 403
Forbidden ``pods "x" is forbidden: exceeded quota: <name>, requested: …, used: …, limited: …``;
``limits.<extended>`` is accepted but never counted; ``status.hard`` / ``status.used`` are kept by
the quota controller; ``spec.hard`` is stored canonical (:func:`canonical_quantity`). A controller
whose pod was refused writes a ``FailedCreate`` Warning Event (``Error creating: <message>``) and
tries again after :attr:`FakeApiServer.create_backoff` (fake clock). Events are listed with field
selectors ``reason``, ``type``, ``involvedObject.{kind,name,namespace,uid}``. The pod lifecycle
records the scheduler's and the kubelet's events: ``Scheduled`` when the scheduler binds a pod,
``Pulled`` / ``Created`` / ``Started`` when its containers start (:meth:`set_pod_phase` Running),
``Killing`` on a graceful delete of running containers, ``BackOff`` in a crash loop.

Pod logs: ``GET .../pods/{name}/log`` (text/plain; ``tailLines``, ``limitBytes``, ``container``,
``previous``) answers what :meth:`~FakeApiServer.set_pod_log` stored, with the API server's and the
kubelet's errors (see :meth:`FakeApiServer._pod_log`).

Not implemented: ``sendInitialEvents`` (streaming lists), other kinds/API groups, aggregated
discovery (``APIGroupDiscoveryList``; the plain documents answer), OpenAPI (``/openapi/v2``,
``/openapi/v3``: 404, so kubectl apply needs ``--validate=false``), server-side printing (``as=Table``:
kubectl falls back to its NAME / AGE columns), managedFields of non-apply writes,
authentication/authorization, other admission/defaulting (beyond the tolerations above, quota
scopes and the "must specify requests" constraint), finalizers other than foregroundDeletion,
``dryRun``, rollout surge/availability budgets and history, json-patch, schema
validation beyond the checks listed above; DRA constraints (matchAttribute), admin access, device
taints, capacity selectors and CEL beyond the subset of :func:`cel_compile` (refused with 422).

Test controls: :meth:`~FakeApiServer.set_pod_phase`, :meth:`~FakeApiServer.set_node_ready`,
:meth:`~FakeApiServer.advance`, :meth:`~FakeApiServer.objects`,
:meth:`~FakeApiServer.inject` (fault injection), :attr:`~FakeApiServer.requests` (a log of
``(method, path)``), :attr:`~FakeApiServer.request_log` (method, path, query and how many objects
the answer carried: the items of a list, the events of a watch).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import re
import secrets
import select
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
        # Headless Services (rendezvous of per-replica gangs) and ConfigMaps (Ascend rank tables).
        Resource("services", "Service", "v1", True),
        Resource("configmaps", "ConfigMap", "v1", True),
        Resource("jobs", "Job", "batch/v1", True),
        Resource("deployments", "Deployment", "apps/v1", True),
        Resource("replicasets", "ReplicaSet", "apps/v1", True),
        Resource("daemonsets", "DaemonSet", "apps/v1", True),
        # Dynamic Resource Allocation, GA in Kubernetes 1.34 (resource.k8s.io/v1):
        # https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-slice-v1/
        Resource("resourceslices", "ResourceSlice", "resource.k8s.io/v1", False),
        Resource("deviceclasses", "DeviceClass", "resource.k8s.io/v1", False),
        # https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-v1/
        Resource("resourceclaims", "ResourceClaim", "resource.k8s.io/v1", True),
        # https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-template-v1/
        Resource("resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io/v1", True),
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

# The log subresource of a pod (core/v1 "read log of the specified Pod").
_LOG_PATH_RE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log/?$")

# Strategic-merge keys for lists (path suffix -> merge key); other lists are replaced.
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name"}

# -- discovery (https://kubernetes.io/docs/reference/using-api/api-concepts/#discovery-api) ------
# Per served resource: singularName, shortNames, categories, as kube-apiserver's registries declare
# them (pkg/registry/core/pod/storage/storage.go ShortNames "po", Categories "all"; namespace "ns",
# node "no", resourcequota "quota", event "ev", service "svc", configmap "cm"; apps deployment
# "deploy", replicaset "rs", daemonset "ds"; batch Job and resource.k8s.io kinds have none). The
# shapes follow a real v1.31 kube-apiserver's /api/v1 APIResourceList (kubectl -v=9 log:
# {"name","singularName","namespaced","kind","verbs","shortNames","categories"}; subresources with
# an empty singularName). Verbs are the ones this fake implements: no deletecollection.
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_DISCOVERY = {
    "namespaces": ("namespace", ["ns"], []),
    "nodes": ("node", ["no"], []),
    "pods": ("pod", ["po"], ["all"]),
    "resourcequotas": ("resourcequota", ["quota"], []),
    "events": ("event", ["ev"], []),
    "services": ("service", ["svc"], ["all"]),
    "configmaps": ("configmap", ["cm"], []),
    "jobs": ("job", [], ["all"]),
    "deployments": ("deployment", ["deploy"], ["all"]),
    "replicasets": ("replicaset", ["rs"], ["all"]),
    "daemonsets": ("daemonset", ["ds"], ["all"]),
    "resourceslices": ("resourceslice", [], []),
    "deviceclasses": ("deviceclass", [], []),
    "resourceclaims": ("resourceclaim", [], []),
    "resourceclaimtemplates": ("resourceclaimtemplate", [], []),
    "selfsubjectaccessreviews": ("selfsubjectaccessreview", [], []),
}
# Subresources the fake answers: .../status (any kind with a status; get, patch, update) and pods/log.
_STATUS_SUBRESOURCE = {
    "namespaces",
    "nodes",
    "pods",
    "resourcequotas",
    "services",
    "jobs",
    "deployments",
    "replicasets",
    "daemonsets",
    "resourceclaims",
}


def discovery_resources(group_version: str) -> dict:
    """The APIResourceList of ``group_version`` (``v1`` or ``<group>/<version>``)."""
    resources = []
    for res in sorted(RESOURCES.values(), key=lambda r: r.plural):
        if res.api_version != group_version:
            continue
        singular, short, categories = _DISCOVERY[res.plural]
        verbs = ["create"] if res.plural == "selfsubjectaccessreviews" else list(_VERBS)
        entry = {
            "name": res.plural,
            "singularName": singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": verbs,
        }
        if short:
            entry["shortNames"] = list(short)
        if categories:
            entry["categories"] = list(categories)
        resources.append(entry)
        subs = []
        if res.plural == "pods":
            subs.append(("log", ["get"]))
        if res.plural in _STATUS_SUBRESOURCE:
            subs.append(("status", ["get", "patch", "update"]))
        for sub, sub_verbs in subs:
            resources.append(
                {
                    "name": f"{res.plural}/{sub}",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": res.kind,
                    "verbs": sub_verbs,
                }
            )
    answer = {"kind": "APIResourceList", "groupVersion": group_version, "resources": resources}
    if group_version != "v1":
        answer["apiVersion"] = "v1"
    return answer


def discovery_groups() -> dict:
    """``/apis``: the APIGroupList of every named group the fake serves (one version each)."""
    groups = []
    for gv in GROUP_PREFIX:
        if "/" not in gv:
            continue
        name, version = gv.split("/")
        ref = {"groupVersion": gv, "version": version}
        groups.append({"name": name, "versions": [ref], "preferredVersion": dict(ref)})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def discovery_document(path: str, address: str = "127.0.0.1") -> dict | None:
    """``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>`` and ``/apis/<group>/<version>``; None for
    any other path. Aggregated discovery (``as=APIGroupDiscoveryList``) is not served: the plain
    documents answer with ``Content-Type: application/json``, which client-go's discovery takes as
    the legacy form (kubectl's Accept header lists ``application/json`` last as that fallback)."""
    path = path.rstrip("/")
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }
    if path == "/apis":
        return discovery_groups()
    if path == "/api/v1":
        return discovery_resources("v1")
    if path.startswith("/apis/"):
        parts = path[len("/apis/") :].split("/")
        for group in discovery_groups()["groups"]:
            if parts == [group["name"]]:
                return {"kind": "APIGroup", "apiVersion": "v1", **group}
            if len(parts) == 2 and parts[0] == group["name"] and parts[1] == group["versions"][0]["version"]:
                return discovery_resources(f"{parts[0]}/{parts[1]}")
    return None


def _random_suffix(n: int = 5) -> str:
    """k8s.io/apiserver/pkg/storage/names SimpleNameGenerator (utilrand.String): 5 characters from an
    alphabet without vowels and look-alikes."""
    return "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


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


def _split_requirements(selector: str) -> list[str]:
    """Requirements are separated by commas outside parentheses (``a in (x,y),b``)."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(selector: str) -> list[tuple[str, str, object]]:
    """k8s.io/apimachinery/pkg/labels/selector.go Parse: ``a=b``, ``a==b``, ``a!=b``, ``a`` (exists),
    ``!a`` (absent), set-based ``a in (x,y)`` / ``a notin (x,y)``; comma-separated = AND. Keys must
    be qualified names and values label values (else 400 ``unable to parse requirement``).
    Returns [(key, op, value)], op in = != exists !exists in notin (value a set for in/notin)."""
    reqs: list[tuple[str, str, object]] = []
    for part in _split_requirements(selector):
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", part)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            if not values:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"unable to parse requirement: for 'in', 'notin' operators, values set can't be empty: {part!r}",
                )
            reqs.append((m.group(1), m.group(2), values))
        elif "!=" in part:
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
        elif re.search(r"[\s()<>]", part):
            raise ApiError(
                400,
                "BadRequest",
                f"unable to parse requirement: found '{part}', expected: !, identifier, or 'end of string'",
            )
        else:
            reqs.append((part, "exists", None))
    for key, _, value in reqs:
        errors = qualified_name_errors(key) if key else ["name part must be non-empty"]
        for v in value if isinstance(value, set) else ([value] if isinstance(value, str) else []):
            errors += label_value_errors(v)
        if errors:
            raise ApiError(
                400,
                "BadRequest",
                f"unable to parse requirement: invalid label key or value {key!r}: {errors[0]}",
            )
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
        if op == "in" and labels.get(key) not in value:
            return False
        if op == "notin" and key in labels and labels[key] in value:
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


# Pod field selectors (pkg/registry/core/pod/strategy.go PodToSelectableFields): what
# ``kubectl describe node`` asks for (spec.nodeName, status.phase!=…).
_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)


def _field_match(obj: dict, selector: str) -> bool:
    # A kind-less object is the check of a selector before any object is matched: each kind's
    # fields are allowed then, and refused later for the other kinds' objects.
    kind = obj.get("kind")
    for part in (p.strip() for p in selector.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z.]+)\s*(==|!=|=)\s*(.*)", part)
        field = m.group(1) if m else ""
        if not m or not (
            field in ("metadata.name", "metadata.namespace")
            or (kind in ("Event", None) and field in _EVENT_FIELDS)
            or (kind in ("Pod", None) and field in _POD_FIELDS)
            # resource.k8s.io ResourceSliceSelectorNodeName / ResourceSliceSelectorDriver
            or (kind in ("ResourceSlice", None) and field in ("spec.nodeName", "spec.driver"))
        ):
            raise ApiError(
                400, "BadRequest", f'field label not supported: "{part.split("=")[0].rstrip("!")}"'
            )
        field, op, value = m.groups()
        if field.startswith("metadata."):
            actual = obj["metadata"].get(field.split(".")[1], "")
        elif field == "spec.hostNetwork":
            actual = "true" if (obj.get("spec") or {}).get("hostNetwork") is True else "false"
        elif field == "status.podIP":
            ips = (obj.get("status") or {}).get("podIPs") or [
                {"ip": (obj.get("status") or {}).get("podIP", "")}
            ]
            actual = ips[0].get("ip", "")
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


# -- validation (k8s.io/apimachinery/pkg/util/validation/validation.go, pkg/apis/core/validation) -----
# Field errors as k8s.io/apimachinery/pkg/util/validation/field/errors.go writes them: each becomes a
# StatusCause {reason: "FieldValue<Type>", field: the path, message: ErrorBody()}, and
# apimachinery/pkg/api/errors NewInvalid joins "<field>: <body>" (several in "[…, …]") after
# '<Kind>.<group> "<name>" is invalid: '.
_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_QNAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError: the message, examples and the regular expression."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def dns1123_label_errors(value: str) -> list[str]:
    """validation.IsDNS1123Label (≤ 63)."""
    errs = [_max_len(63)] if len(value) > 63 else []
    if not re.fullmatch(_LABEL_FMT, value):
        errs.append(_regex_error(_DNS1123_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    """validation.IsDNS1123Subdomain (≤ 253)."""
    errs = [_max_len(253)] if len(value) > 253 else []
    if not re.fullmatch(_SUBDOMAIN_FMT, value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errs


def dns1035_label_errors(value: str) -> list[str]:
    """validation.IsDNS1035Label (≤ 63): Services."""
    errs = [_max_len(63)] if len(value) > 63 else []
    if not re.fullmatch(_DNS1035_FMT, value):
        errs.append(_regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """validation.IsQualifiedName: label keys, taint keys — ``[prefix/]name``, name ≤ 63, prefix a
    DNS-1123 subdomain."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        errs = [f"prefix part {m}" for m in dns1123_subdomain_errors(prefix)]
        if errs:
            return errs
    else:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        return ["name part must be non-empty"]
    errs = [f"name part {_max_len(63)}"] if len(name) > 63 else []
    if not re.fullmatch(_QNAME_FMT, name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    """validation.IsValidLabelValue (≤ 63, may be empty)."""
    errs = [_max_len(63)] if len(value) > 63 else []
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _show(value) -> str:
    """How field.Error prints a bad value (strings quoted, numbers bare, objects as JSON here)."""
    if value is None:
        return "null"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class FieldErrors(list):
    """A field.ErrorList: ``add_*`` append StatusCauses ({reason, field, message})."""

    def _add(self, reason: str, field: str, message: str) -> None:
        self.append({"reason": reason, "message": message, "field": field})

    def invalid(self, field: str, value, detail: str) -> None:
        self._add("FieldValueInvalid", field, f"Invalid value: {_show(value)}: {detail}")

    def required(self, field: str, detail: str = "") -> None:
        self._add("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))

    def not_supported(self, field: str, value, valid: list[str]) -> None:
        supported = ", ".join(json.dumps(v) for v in valid)
        self._add(
            "FieldValueNotSupported",
            field,
            f"Unsupported value: {_show(value)}: supported values: {supported}",
        )

    def duplicate(self, field: str, value, detail: str = "") -> None:
        self._add(
            "FieldValueDuplicate",
            field,
            f"Duplicate value: {_show(value)}" + (f": {detail}" if detail else ""),
        )

    def unique_label_name(self, field: str, name: str, seen: set[str], *, empty_too: bool = False) -> None:
        """A list item's ``name``: required, a DNS-1123 label, unique in its list (``seen`` grows);
        ``empty_too``: a second empty name is a duplicate as well (as pod resourceClaims are checked)."""
        if not name:
            self.required(field)
        for msg in dns1123_label_errors(name) if name else []:
            self.invalid(field, name, msg)
        if (name or empty_too) and name in seen:
            self.duplicate(field, name)
        seen.add(name)

    def not_found(self, field: str, value, detail: str = "") -> None:
        self._add(
            "FieldValueNotFound", field, f"Not found: {_show(value)}" + (f": {detail}" if detail else "")
        )

    def forbidden(self, field: str, detail: str) -> None:
        self._add("FieldValueForbidden", field, f"Forbidden: {detail}")


def qualified_kind(res: Resource) -> tuple[str, str]:
    """(group, "<Kind>.<group>") — schema.GroupKind.String(); core kinds have no group."""
    group = res.api_version.split("/")[0] if "/" in res.api_version else ""
    return group, (f"{res.kind}.{group}" if group else res.kind)


def qualified_resource(res: Resource) -> tuple[str, str]:
    """(group, "<plural>.<group>") — schema.GroupResource.String(), as NotFound / AlreadyExists /
    Conflict / Forbidden messages name the object."""
    group = res.api_version.split("/")[0] if "/" in res.api_version else ""
    return group, (f"{res.plural}.{group}" if group else res.plural)


def invalid_error(res: Resource, name: str, causes: list[dict]) -> ApiError:
    """apimachinery/pkg/api/errors NewInvalid: 422, reason Invalid, the causes in details."""
    group, qual = qualified_kind(res)
    text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    return ApiError(
        422,
        "Invalid",
        f'{qual} "{name}" is invalid: ' + (text if len(causes) == 1 else f"[{text}]"),
        {"name": name, "group": group, "kind": res.kind, "causes": list(causes)},
    )


def validate_labels(labels, field: str, errs: FieldErrors) -> None:
    """apimachinery/pkg/apis/meta/v1/validation ValidateLabels: every key a qualified name, every
    value a label value, both reported at the ``labels`` path."""
    if labels is None:
        return
    if not isinstance(labels, dict):
        errs.invalid(field, labels, "must be a map of strings")
        return
    for key, value in sorted(labels.items()):
        for msg in qualified_name_errors(str(key)):
            errs.invalid(field, key, msg)
        if not isinstance(value, str):
            errs.invalid(field, value, "must be a string")
            continue
        for msg in label_value_errors(value):
            errs.invalid(field, value, msg)


# Which name rule a kind's registry validates metadata.name with (ValidateObjectMeta's nameFn):
# Namespace ValidateNamespaceName = NameIsDNSLabel; Service = NameIsDNS1035Label; Pod, Node, Job,
# Deployment, ReplicaSet, DaemonSet, ResourceQuota, Event and the resource.k8s.io kinds =
# NameIsDNSSubdomain (pkg/apis/core/validation, pkg/apis/batch/validation, pkg/apis/apps/validation,
# pkg/apis/resource/validation).
_NAME_RULES = {"namespaces": dns1123_label_errors, "services": dns1035_label_errors}


# -- real ResourceSlices of the DRA drivers (fixtures/dra, sources in fixtures/dra/SOURCES.md) --------
DRA_SAMPLES = Path(__file__).parent / "fixtures" / "dra"


def dra_sample(name: str) -> dict:
    """A driver's ResourceSlice from ``fixtures/dra/<name>.yaml``, as resource.k8s.io/v1: a v1beta1
    sample's ``devices[].basic`` (the v1beta1 BasicDevice wrapper) is unwrapped onto the device, the
    one difference between the two versions for a slice of plain devices."""
    obj = yaml.safe_load((DRA_SAMPLES / f"{name}.yaml").read_text())
    if obj.get("apiVersion") == "resource.k8s.io/v1beta1":
        obj["apiVersion"] = "resource.k8s.io/v1"
        devices = obj["spec"]["devices"]
        obj["spec"]["devices"] = [{"name": d["name"], **(d.get("basic") or {})} for d in devices]
    return obj


# -- consumable capacity (KEP-5075 DRAConsumableCapacity, resource.k8s.io/v1) ---------------------
# The API reference: a DeviceRequest's ``exactly.capacity.requests`` names how much of each device
# capacity the request needs; a device with ``allowMultipleAllocations: true`` may be allocated to
# several requests at once, each consuming its share, never more than ``capacity[].value`` in all;
# ``capacity[].requestPolicy`` gives ``default`` (consumed when the request names none; without a
# policy the full value) and ``validRange {min, max, step}`` / ``validValues`` (a request is rounded up
# to the next valid amount, and one above every valid amount does not fit the device). A device
# without allowMultipleAllocations is exclusive and only needs capacity ≥ the request.


def _consumed_capacity(device: dict, wanted: dict) -> dict[str, Decimal]:
    """What one allocation of a shared device consumes of each capacity; ValueError when a request
    is above the policy's max (or every valid value)."""
    use = {}
    for cap, spec in (device.get("capacity") or {}).items():
        value = parse_quantity(spec["value"])[0]
        policy = spec.get("requestPolicy")
        if cap not in wanted:
            use[cap] = parse_quantity(policy["default"])[0] if policy and policy.get("default") else value
            continue
        q = parse_quantity(wanted[cap])[0]
        if policy and policy.get("validValues"):
            valid = sorted(parse_quantity(v)[0] for v in policy["validValues"])
            q = next((v for v in valid if v >= q), None)
            if q is None:
                raise ValueError(cap)
        elif policy and policy.get("validRange"):
            rng = policy["validRange"]
            lo = parse_quantity(rng.get("min", "0"))[0]
            q = max(q, lo)
            if rng.get("step"):
                step = parse_quantity(rng["step"])[0]
                q = lo + ((q - lo) / step).to_integral_value(rounding=ROUND_CEILING) * step
            if rng.get("max") is not None and q > parse_quantity(rng["max"])[0]:
                raise ValueError(cap)
        use[cap] = q
    return use


def _consumable_fits(device: dict, wanted: dict, already: dict[str, Decimal]) -> bool:
    """Whether ``device`` can serve a request for ``wanted`` capacity, given what other allocations
    already consume of it."""
    caps = device.get("capacity") or {}
    if any(cap not in caps for cap in wanted):
        return False
    if not device.get("allowMultipleAllocations"):
        return all(parse_quantity(wanted[c])[0] <= parse_quantity(caps[c]["value"])[0] for c in wanted)
    try:
        use = _consumed_capacity(device, wanted)
    except ValueError:
        return False
    return all(already.get(c, Decimal(0)) + q <= parse_quantity(caps[c]["value"])[0] for c, q in use.items())


def _quantity_text(q: Decimal, like: str) -> str:
    """``q`` spelled as a Quantity in its canonical form: binary (the largest of Ei … Ki that
    divides it) where the capacity's value is binary, else a plain number."""
    if parse_quantity(like)[1] == "binary" and q and q == q.to_integral_value():
        for shift, suffix in ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
            if int(q) % (1 << shift) == 0:
                return f"{int(q) >> shift}{suffix}"
    return str(int(q)) if q == q.to_integral_value() else str(q)


# -- partitionable devices (KEP-4815 DRAPartitionableDevices, resource.k8s.io/v1) -------------------
# The API reference: ``ResourceSliceSpec.sharedCounters`` is a list of CounterSets {name, counters:
# name -> {value: quantity}} ("Only one of Devices and SharedCounters can be set in a ResourceSlice";
# at most 8 sets); ``Device.consumesCounters`` lists {counterSet, counters} a device uses while it is
# allocated. The counter sets are the pool's (a device names a set of its driver's pool, published in
# another slice of that pool). A device can be allocated only while every counter it consumes has at
# least that much left after the other allocated devices' consumption.


def _counter_consumption(device: dict) -> dict[tuple[str, str], Decimal]:
    """(counter set, counter) -> amount the device consumes while allocated."""
    use: dict[tuple[str, str], Decimal] = {}
    for c in device.get("consumesCounters") or []:
        for name, counter in ((c or {}).get("counters") or {}).items():
            key = (str(c.get("counterSet") or ""), name)
            use[key] = use.get(key, Decimal(0)) + parse_quantity((counter or {}).get("value", "0"))[0]
    return use


def _first_fitting(free: list, count: int, counters: dict, used: dict) -> list | None:
    """The first ``count`` of ``free`` (driver, pool, device) whose counters fit together, or None."""
    chosen: list = []
    trial = {pool: dict(u) for pool, u in used.items()}
    for d, p, dev in free:
        if len(chosen) == count:
            break
        if not _counters_fit(dev, counters.get((d, p)), trial.get((d, p), {})):
            continue
        chosen.append((d, p, dev))
        mine = trial.setdefault((d, p), {})
        for ck, q in _counter_consumption(dev).items():
            mine[ck] = mine.get(ck, Decimal(0)) + q
    return chosen if len(chosen) == count else None


def _counters_fit(device: dict, available: dict | None, used: dict) -> bool:
    """True when the device consumes no counters, or every counter it consumes has enough left of its
    pool's ``available`` (counter set, counter) -> value after ``used``. A set or counter the pool does
    not publish is never enough (the device cannot be allocated)."""
    need = _counter_consumption(device)
    if not need:
        return True
    available = available or {}
    return all(
        key in available and used.get(key, Decimal(0)) + q <= available[key] for key, q in need.items()
    )


# -- a CEL subset for DRA selectors ------------------------------------------------------------------
# DRA device selectors are CEL expressions over ``device`` (driver, attributes, capacity):
# https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/ and
# staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go. The fake understands only
#   device.driver | device.attributes["<domain>"].<name> | device.attributes["<domain>"]["<name>"]
#   == != in, string / int / bool literals and lists of them, && || ! and parentheses
# and refuses anything else with the 422 a compilation failure gets (a real server would accept more
# CEL; the fake never guesses what it cannot evaluate).
_CEL_TOKEN = re.compile(
    r"\s*(?:(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')|(?P<num>-?[0-9]+)(?![0-9A-Za-z_.])"
    r"|(?P<op>==|!=|&&|\|\||[()\[\].,!])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)


class CelError(Exception):
    """A compilation failure (the fake's parser) or a runtime error (e.g. ``no such key``)."""


class _Version(str):
    """A ``version`` attribute: a semver value, never equal to a plain string in CEL."""


def _cel_tokens(text: str) -> list[tuple[str, object, int]]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _CEL_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            col = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise CelError(
                f"ERROR: <input>:1:{col + 1}: Syntax error: token recognition error at: '{text[col]}' "
                "(or an operator the fake API server's CEL subset does not implement)"
            )
        kind = m.lastgroup
        raw = m.group(kind)
        if kind == "str":
            value: object = json.loads('"' + raw[1:-1].replace('"', '\\"').replace("\\'", "'") + '"')
        elif kind == "num":
            value = int(raw)
        else:
            value = raw
        tokens.append((kind, value, m.start(kind)))
        pos = m.end()
    return tokens


class _CelParser:
    """Recursive descent over the tokens → a small AST of tuples."""

    def __init__(self, text: str):
        self.text, self.tokens, self.i = text, _cel_tokens(text), 0

    def fail(self, what: str):
        col = self.tokens[self.i][2] + 1 if self.i < len(self.tokens) else len(self.text) + 1
        raise CelError(f"ERROR: <input>:1:{col}: Syntax error: {what}")

    def peek(self, value=None):
        if self.i < len(self.tokens):
            kind, tok, _ = self.tokens[self.i]
            if value is None or (kind in ("op", "id") and tok == value):
                return self.tokens[self.i]
        return None

    def take(self, value):
        if not self.peek(value):
            self.fail(f"expected '{value}'")
        self.i += 1

    def parse(self):
        if not self.tokens:
            raise CelError("ERROR: <input>:1:1: Syntax error: mismatched input '<EOF>'")
        node = self.expr()
        if self.i != len(self.tokens):
            self.fail(f"unexpected '{self.tokens[self.i][1]}' (not in the fake API server's CEL subset)")
        if node[0] not in ("or", "and", "not", "cmp", "lit") or (
            node[0] == "lit" and not isinstance(node[1], bool)
        ):
            raise CelError("ERROR: <input>:1:1: expression must evaluate to a bool")
        return node

    def expr(self):
        node = self.conj()
        while self.peek("||"):
            self.i += 1
            node = ("or", node, self.conj())
        return node

    def conj(self):
        node = self.unary()
        while self.peek("&&"):
            self.i += 1
            node = ("and", node, self.unary())
        return node

    def unary(self):
        if self.peek("!"):
            self.i += 1
            return ("not", self.unary())
        left = self.primary()
        for op in ("==", "!=", "in"):
            if self.peek(op):
                self.i += 1
                return ("cmp", op, left, self.primary())
        return left

    def primary(self):
        tok = self.peek()
        if tok is None:
            self.fail("mismatched input '<EOF>'")
        kind, value, _ = tok
        if kind in ("str", "num"):
            self.i += 1
            return ("lit", value)
        if kind == "id" and value in ("true", "false"):
            self.i += 1
            return ("lit", value == "true")
        if value == "(":
            self.i += 1
            node = self.expr()
            self.take(")")
            return node
        if value == "[":
            self.i += 1
            items = []
            while not self.peek("]"):
                item = self.primary()
                if item[0] != "lit":
                    self.fail("list items must be literals in the fake API server's CEL subset")
                items.append(item[1])
                if not self.peek("]"):
                    self.take(",")
            self.take("]")
            return ("lit", items)
        if kind == "id" and value == "device":
            self.i += 1
            path: list[str] = []
            while True:
                if self.peek("."):
                    self.i += 1
                    nxt = self.peek()
                    if nxt is None or nxt[0] != "id":
                        self.fail("expected a field name after '.'")
                    self.i += 1
                    if self.peek("("):
                        self.fail(f"function '{nxt[1]}' is not in the fake API server's CEL subset")
                    path.append(str(nxt[1]))
                elif self.peek("["):
                    self.i += 1
                    key = self.peek()
                    if key is None or key[0] != "str":
                        self.fail("expected a string index")
                    self.i += 1
                    self.take("]")
                    path.append(str(key[1]))
                else:
                    break
            if (
                not path
                or path[0] not in ("driver", "attributes")
                or (path[0] == "driver" and len(path) != 1)
                or (path[0] == "attributes" and len(path) != 3)
            ):
                self.fail(
                    'only device.driver and device.attributes["<domain>"].<name> are in the fake API '
                    "server's CEL subset"
                )
            return ("path", tuple(path))
        if kind == "id":
            if self.i + 1 < len(self.tokens) and self.tokens[self.i + 1][1] == "(":
                self.fail(f"function '{value}' is not in the fake API server's CEL subset")
            col = tok[2] + 1
            raise CelError(f"ERROR: <input>:1:{col}: undeclared reference to '{value}' (in container '')")
        self.fail(f"unexpected '{value}'")


def cel_compile(expression: str):
    """Parse a selector expression of the subset; CelError when it is not one."""
    return _CelParser(expression).parse()


def device_env(driver: str, device: dict) -> dict:
    """The ``device`` variable: attributes grouped by domain — an unqualified name belongs to the
    driver's domain, ``domain/name`` to that domain (the DRA CEL environment)."""
    domains: dict[str, dict] = {}
    for key, value in (device.get("attributes") or {}).items():
        domain, _, name = key.rpartition("/")
        domain = domain or driver
        if isinstance(value, dict) and len(value) == 1:
            ((vtype, v),) = value.items()
            v = _Version(v) if vtype == "version" else v
        else:
            v = value
        domains.setdefault(domain, {})[name] = v
    return {"driver": driver, "attributes": domains}


def cel_evaluate(node, env: dict):
    """Evaluate a compiled expression; CelError on a runtime error (a missing attribute is ``no such
    key``, as CEL map access; a missing domain is an empty map). ``&&`` / ``||`` absorb an error
    when the other side decides (CEL's commutative logic)."""
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "path":
        path = node[1]
        if path[0] == "driver":
            return env["driver"]
        attrs = env["attributes"].get(path[1], {})
        if path[2] not in attrs:
            raise CelError(f"no such key: {path[2]}")
        return attrs[path[2]]
    if op == "not":
        value = cel_evaluate(node[1], env)
        if not isinstance(value, bool):
            raise CelError("no such overload: !_")
        return not value
    if op in ("and", "or"):
        results = []
        for side in node[1:]:
            try:
                results.append(cel_evaluate(side, env))
            except CelError as e:
                results.append(e)
        decisive = op == "or"  # True decides ||, False decides &&
        if any(r is decisive for r in results):
            return decisive
        for r in results:
            if isinstance(r, CelError):
                raise r
            if not isinstance(r, bool):
                raise CelError(f"no such overload: _{'||' if op == 'or' else '&&'}_")
        return not decisive
    _, cmp, left, right = node
    a, b = cel_evaluate(left, env), cel_evaluate(right, env)

    def same(x, y) -> bool:  # heterogeneous equality: values of different types are never equal
        if isinstance(x, bool) != isinstance(y, bool) or isinstance(x, _Version) != isinstance(y, _Version):
            return False
        return type(x) is type(y) and x == y if not isinstance(x, str) else isinstance(y, str) and x == y

    if cmp == "in":
        if not isinstance(b, list):
            raise CelError("no such overload: @in")
        return any(same(a, item) for item in b)
    return same(a, b) if cmp == "==" else not same(a, b)


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


# -- server-side apply (https://kubernetes.io/docs/reference/using-api/server-side-apply/) ---------
APPLY_PATCH = "application/apply-patch+yaml"
# Fields the field manager never tracks (apiserver's fieldmanager strips them: type and identity
# meta, server-set metadata) and, for kinds with a status subresource, the whole status.
_UNTRACKED = {"apiVersion", "kind"}
_UNTRACKED_META = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
}


def _drop_nulls(value):
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def field_paths(value, prefix: tuple = (), key: str = "") -> set[tuple]:
    """The leaf fields of an applied configuration, as FieldsV1 path segments (``f:<field>``,
    ``k:{"name":…}`` for an item of a list with a merge key, ``.`` for that item itself); other
    lists are atomic (one leaf)."""
    out: set[tuple] = set()
    if isinstance(value, dict) and value:
        for k, v in value.items():
            if not prefix and k in _UNTRACKED:
                continue
            if prefix == ("f:metadata",) and k in _UNTRACKED_META:
                continue
            out |= field_paths(v, (*prefix, f"f:{k}"), k)
        return out
    mkey = _MERGE_KEYS.get(key)
    if isinstance(value, list) and mkey and value and all(isinstance(i, dict) and mkey in i for i in value):
        for item in value:
            seg = "k:" + json.dumps({mkey: item[mkey]}, separators=(",", ":"))
            out.add((*prefix, seg, "."))
            out |= field_paths(item, (*prefix, seg), "")
        return out
    if prefix:
        out.add(prefix)
    return out


def fields_v1(paths: set[tuple]) -> dict:
    """Paths → the FieldsV1 tree (a leaf is ``{}``)."""
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for seg in path:
            node = node.setdefault(seg, {})
    return tree


def fields_v1_paths(tree: dict, prefix: tuple = ()) -> set[tuple]:
    out: set[tuple] = set()
    for seg, child in (tree or {}).items():
        if isinstance(child, dict) and child:
            out |= fields_v1_paths(child, (*prefix, seg))
        else:
            out.add((*prefix, seg))
    return out


_MISSING = object()


def _at_path(obj, path: tuple):
    """The value at a FieldsV1 path (``_MISSING`` when absent)."""
    node = obj
    for seg in path:
        if seg == ".":
            return node
        if seg.startswith("f:") and isinstance(node, dict):
            node = node.get(seg[2:], _MISSING)
        elif seg.startswith("k:") and isinstance(node, list):
            want = json.loads(seg[2:])
            node = next(
                (i for i in node if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())),
                _MISSING,
            )
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def _remove_path(obj, path: tuple) -> None:
    """Remove the field (or the keyed list item, for a path ending in ``.``) at ``path``."""
    if path and path[-1] == ".":
        parent, seg = _at_path(obj, path[:-2]), path[-2]
        if isinstance(parent, list):
            want = json.loads(seg[2:])
            parent[:] = [
                i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()))
            ]
        return
    parent = _at_path(obj, path[:-1])
    if isinstance(parent, dict) and path[-1].startswith("f:"):
        parent.pop(path[-1][2:], None)


def field_path_text(path: tuple) -> str:
    """A path as structured-merge-diff prints it: ``.spec.containers[name="c"].image``."""
    text = ""
    for seg in path:
        if seg == ".":
            continue
        if seg.startswith("f:"):
            text += "." + seg[2:]
        else:
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(seg[2:]).items()) + "]"
    return text


class _Fault:
    def __init__(self, pattern: str, status, times: int, method: str | None):
        self.regex = re.compile(pattern)
        self.status = status
        self.remaining = times
        self.method = method


class _Store(dict):
    """The object store; remembers which keys were written or removed since the last watch flush
    (:meth:`FakeApiServer._watch_flush`), and the last state of a removed object."""

    def __init__(self):
        super().__init__()
        self.touched: set = set()
        self.removed: dict = {}

    def __setitem__(self, key, value):
        self.touched.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.removed[key] = self[key]
        super().__delitem__(key)

    def pop(self, key, *default):
        if key in self:
            self.removed[key] = self[key]
        return super().pop(key, *default)


@dataclass
class _WatchStream:
    """An accepted watch request, streamed by the handler outside the server's lock."""

    res: Resource
    ns: str
    reqs: list
    fsel: str
    cursor: int  # the last resourceVersion delivered
    initial: list  # synthetic ADDED objects (resourceVersion unset or "0")
    deadline: float  # time.monotonic()
    bookmarks: bool
    error: dict | None = None  # an ERROR event's Status, sent alone
    next_bookmark: float | None = None  # time.monotonic() of the next BOOKMARK; None: no more


# The watch cache's bookmark schedule (kubernetes/kubernetes, read, not run):
# staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go @ 04d6b4f11d533e92dc999e981f73f7b44dacd591,
# ``nextBookmarkTime``: "(a) right before the watcher timeout - for now we simply set it 2s before
# the deadline" and "(b) roughly every minute"; no time left before that ("heartbeatTime.Before(now)")
# schedules none. Case (c), "immediately", applies only while a ``bookmarkAfterResourceVersion`` is
# awaited, which cacher.go ``getBookmarkAfterResourceVersionLockedFunc`` sets only for
# ``sendInitialEvents=true`` (else 0: ``setBookmarkAfterResourceVersion`` counts it as sent), so a
# plain watch gets no bookmark after its replay. The frequency is cacher.go's
# ``defaultBookmarkFrequency = time.Minute``; the cacher re-schedules a watcher after each bookmark
# it sent. The real server fires them from one-second buckets ("you can get the bookmark within
# (X-1,X+1) period", cacher.go @ 00319881a809400fd88feac10e724a9e4afae4d9); the fake sends on time.
BOOKMARK_BEFORE_DEADLINE_S = 2.0
BOOKMARK_FREQUENCY_S = 60.0


def next_bookmark_time(now: float, deadline: float, frequency: float = BOOKMARK_FREQUENCY_S) -> float | None:
    """When the watch cache sends a watch's next BOOKMARK (``nextBookmarkTime``), or None (no more)."""
    heartbeat = min(now + frequency, deadline - BOOKMARK_BEFORE_DEADLINE_S)
    return heartbeat if heartbeat > now else None


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
        entry = {"method": self.command, "path": url.path, "query": parse_qs(url.query), "objects": 0}
        # When the request came, its headers were sent and it ended (time.monotonic()).
        entry["started"] = time.monotonic()
        srv.request_log.append(entry)
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
        delay = srv._header_delay(self.command, url.path)
        if delay:
            time.sleep(delay)  # queued (API Priority and Fairness) or a lagging watch cache; no lock held
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
        with srv._lock:
            srv._watch_flush()  # a write's events are recorded before the next request is read
        if fault == "timeout":
            # The request took effect; the answer comes too late for the client.
            time.sleep(srv.timeout_delay)
        if isinstance(body, _WatchStream):
            self._stream_watch(body, entry)
            return
        if isinstance(body, dict) and isinstance(body.get("items"), list):
            entry["objects"] = len(body["items"])
        entry["answered"] = time.monotonic()
        self._send(code, body, headers)
        entry["ended"] = time.monotonic()

    def _stream_watch(self, watch: _WatchStream, entry: dict) -> None:
        """Send a watch's events as chunks (RFC 9112 chunked transfer coding), one JSON line each,
        until ``timeoutSeconds``, the client going away or the server stopping."""
        srv = self.server
        self.protocol_version = "HTTP/1.1"  # chunked transfer coding is HTTP/1.1
        self.close_connection = True

        def chunk(events: list[dict]) -> None:
            data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
            entry["objects"] += len(events)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def client_gone(wait: float) -> bool:
            readable, _, _ = select.select([self.connection], [], [], wait)
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)

        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            entry["answered"] = time.monotonic()
            if watch.error is not None:
                chunk([{"type": "ERROR", "object": watch.error}])
            else:
                if watch.initial:
                    chunk([{"type": "ADDED", "object": o} for o in watch.initial])
                    watch.initial = []
                # No bookmark after the replay, none at the deadline: only on the watch cache's
                # schedule (next_bookmark_time).
                while True:
                    events, error = srv._watch_next(watch)
                    if error is not None:
                        chunk([{"type": "ERROR", "object": error}])
                        break
                    now = time.monotonic()
                    if watch.next_bookmark is not None and now >= watch.next_bookmark:
                        events.append(srv._bookmark(watch))
                        watch.next_bookmark = next_bookmark_time(
                            now, watch.deadline, srv.bookmark_frequency_s
                        )
                    if events:
                        chunk(events)
                    if now >= watch.deadline or srv._stopping:
                        break
                    wake = min(watch.deadline, watch.next_bookmark or watch.deadline)
                    if client_gone(min(srv.watch_poll_s, max(0.0, wake - time.monotonic()))):
                        return  # it stopped watching
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away (it stopped watching)
        finally:
            entry["ended"] = time.monotonic()

    def _send(self, code: int, body: dict | bytes, headers: dict | None = None):
        # A pod log is text/plain (bytes); everything else a JSON object.
        raw = isinstance(body, bytes)
        data = body if raw else json.dumps(body).encode()
        try:
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "text/plain" if raw else "application/json")
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
        # Extended resources kube-scheduler leaves to an extender (HAMi's managedResources with
        # ignoredByScheduler: true): see _extended_shortfall.
        self.ignored_by_scheduler: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._store: _Store = _Store()
        self._rv = 1000
        # Every request: {"method", "path", "query", "objects"} (items listed / events watched).
        self.request_log: list[dict] = []
        # Watch: the history of changes (the apiserver's watch cache), oldest first, as
        # (rv, plural, namespace, type, object, previous object); a watch from a version before
        # _history_start answers 410 Expired.
        self.watch_history_size = 20000
        self._history: list[tuple] = []
        self._history_rvs: list[int] = []
        self._history_start = self._rv
        self._watch_last: dict[tuple[str, str, str], dict] = {}  # key -> the state last recorded
        self._bumped: list[dict] = []
        self.watch_poll_s = 0.02
        self.watch_default_timeout = 60.0
        # The watch cache's bookmark frequency (cacher.go defaultBookmarkFrequency; a test may shorten it).
        self.bookmark_frequency_s = BOOKMARK_FREQUENCY_S
        # Seconds every list and watch waits before its response headers: a request queued by API
        # Priority and Fairness, or a watch cache behind the version asked for (it blocks up to 3 s:
        # staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go @ 00f3bd4418723bfd579a3b13ac1f824083ac5942
        # ``blockTimeout = 3 * time.Second``). A watch's timeoutSeconds counts from after the wait.
        self.header_delay_s = 0.0
        self._stopping = False
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
        # List paging: the snapshots that continue tokens read from, oldest first (see _list).
        self._list_snapshots: dict[tuple[int, str, str], list] = {}
        self.list_snapshots_kept = 32
        self._compacted_rv = 0
        self.git_version = "v1.34.1"
        # Container logs (set_pod_log): (namespace, pod, container, previous) -> text.
        self._logs: dict[tuple[str, str, str, bool], str] = {}
        # The NVIDIA DRA kubelet plugin's feature gates ({"TimeSlicingSettings": bool, "MPSSupport":
        # bool}); None: the driver's claim preparation is not modelled (every bound pod may run).
        self.nvidia_dra_feature_gates: dict[str, bool] | None = None
        self._prepare_failed: dict[tuple[str, str], str] = {}  # (namespace, pod) -> kubelet's message

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
        self._stopping = True
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
            if phase == "Running" and (namespace, name) in self._prepare_failed:
                failed = self._prepare_failed[(namespace, name)]
                raise RuntimeError(f"the kubelet cannot start {namespace}/{name}: {failed}")
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
                        "imageID": "",  # ContainerStatus.imageID is required (empty before the image is pulled)
                        "ready": phase == "Running",
                        "restartCount": 0,
                        "state": state,
                    }
                )
            was_running = any(
                "running" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or []
            )
            status["containerStatuses"] = cstatuses
            self._bump(pod)
            if phase == "Running" and not was_running:
                self._record_kubelet_events(pod, "Started")
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
        self._bumped.append(obj)

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
        if spec.get("resourceClaims"):
            return  # bound by the DynamicResources plugin once its claims are allocated (_schedule_dra)
        host = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        if host and ("nodes", "", host) in self._store:
            bound_by_scheduler = not spec.get("nodeName")
            if bound_by_scheduler:
                missing = self._extended_shortfall(pod, self._store[("nodes", "", host)])
                if missing:
                    self._hold_unschedulable(pod, missing)
                    return
            spec["nodeName"] = host
            if bound_by_scheduler:
                self._record_scheduled(pod, host)
                self._mark_scheduled(pod)

    # kube-scheduler's NodeResourcesFit for extended resources (pkg/scheduler/framework/plugins/
    # noderesources/fit.go): a pod fits a node when, for every extended resource it requests (requests
    # default to limits; extended resources must have requests == limits), the node's
    # ``status.allocatable`` minus what the non-terminal pods bound there request covers it; a name the
    # node does not advertise counts as 0 ("Insufficient <name>"). Names in ``ignored_by_scheduler``
    # are skipped, as a scheduler extender's ``managedResources`` with ``ignoredByScheduler: true``
    # make kube-scheduler do (HAMi's chart: charts/hami/templates/_helpers.tpl
    # "hami-vgpu.scheduler.managedResources"). A node registered without any ``capacity`` is not
    # modelled (the tests that never said what it has) and takes any pod, as before.
    def _extended_requests(self, pod: dict) -> dict[str, Decimal]:
        wanted: dict[str, Decimal] = {}
        for c in (pod.get("spec") or {}).get("containers") or []:
            resources = c.get("resources") or {}
            merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for rname, qty in merged.items():
                if _is_extended(rname) and rname not in self.ignored_by_scheduler:
                    wanted[rname] = wanted.get(rname, Decimal(0)) + parse_quantity(str(qty))[0]
        return wanted

    def _extended_shortfall(self, pod: dict, node: dict) -> list[str]:
        allocatable = (node.get("status") or {}).get("allocatable")
        wanted = self._extended_requests(pod)
        if allocatable is None or not wanted:
            return []
        name = node["metadata"]["name"]
        used: dict[str, Decimal] = {}
        for key, other in self._store.items():
            if (
                key[0] == "pods"
                and other is not pod
                and (other.get("spec") or {}).get("nodeName") == name
                and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ):
                for rname, qty in self._extended_requests(other).items():
                    used[rname] = used.get(rname, Decimal(0)) + qty
        return sorted(
            rname
            for rname, qty in wanted.items()
            if parse_quantity(str(allocatable.get(rname, "0")))[0] - used.get(rname, Decimal(0)) < qty
        )

    def _hold_unschedulable(self, pod: dict, missing: list[str]) -> None:
        """The pod stays Pending: PodScheduled False (Unschedulable) and a ``FailedScheduling`` Warning
        from default-scheduler, in kube-scheduler's wording ("0/3 nodes are available: 1 Insufficient
        nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector.")."""
        total = sum(1 for k in self._store if k[0] == "nodes")
        parts = [f"1 Insufficient {rname}" for rname in missing]
        if total > 1:
            parts.append(f"{total - 1} node(s) didn't match Pod's node affinity/selector")
        message = f"0/{total} nodes are available: " + ", ".join(parts) + "."
        status = pod.setdefault("status", {})
        conditions = status.get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current is not None and current.get("message") == message:
            return
        status["conditions"] = [c for c in conditions if c.get("type") != "PodScheduled"] + [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": _now(),
            }
        ]
        if pod["metadata"].get("uid"):
            self._record_event(pod, "FailedScheduling", message, "default-scheduler")

    @staticmethod
    def _mark_scheduled(pod: dict) -> None:
        status = pod.setdefault("status", {})
        conditions = status.get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
            status["conditions"] = [c for c in conditions if c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}
            ]

    def _retry_unschedulable(self) -> None:
        """kube-scheduler retries an unschedulable pod when the cluster changes (a pod leaves, a node's
        allocatable grows): pods held by :meth:`_hold_unschedulable` are tried again."""
        for key, pod in list(self._store.items()):
            spec = pod.get("spec") or {}
            if (
                key[0] != "pods"
                or spec.get("nodeName")
                or spec.get("resourceClaims")
                or pod["metadata"].get("deletionTimestamp")
                or (pod.get("status") or {}).get("phase") != "Pending"
                or not any(
                    c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in (pod.get("status") or {}).get("conditions") or []
                )
            ):
                continue
            rv = self._rv
            self._schedule_pod(pod)
            if spec.get("nodeName") or self._rv != rv:
                self._bump(pod)

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
        self._record_kubelet_events(pod, "Killing")

    def _remove_pod(self, key: tuple[str, str, str]) -> None:
        pod = self._store.pop(key, None)
        self._terminate_at.pop(key, None)
        self._prepare_failed.pop((key[1], key[2]), None)
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
                "imageID": "",  # ContainerStatus.imageID is required (empty before the image is pulled)
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
                    "imageID": "",  # ContainerStatus.imageID is required (empty before the image is pulled)
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
            self._record_kubelet_events(pod, "BackOff")
            self._run_controllers()
            return copy.deepcopy(pod)

    def _run_controllers(self) -> None:
        if not self.controllers:
            return
        for _ in range(5):  # until nothing changes (each pass may enable the next)
            rv = self._rv
            self._sync_namespaces()
            self._taint_eviction()
            self._garbage_collect()
            self._sync_resource_claims()
            self._schedule_dra()
            self._retry_unschedulable()
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
            name = f"{owner_meta['name'][:58]}-{_random_suffix()}"
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
            self._default_pod_spec(pod["spec"], pod=True)
            try:
                self._namespace_lifecycle(RESOURCES["pods"], owner_meta["namespace"], name)
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
        discovery = discovery_document(path, f"127.0.0.1:{self.port}") if method == "GET" else None
        if discovery is not None:
            return 200, discovery
        log = _LOG_PATH_RE.match(path)
        if log:
            return self._pod_log(method, log.group("ns"), log.group("name"), query)
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
        apply = method == "PATCH" and content_type.split(";")[0].strip() == APPLY_PATCH
        if raw:
            try:
                # A server-side apply body is YAML (JSON is YAML too); every other body is JSON.
                body = yaml.safe_load(raw) if apply else json.loads(raw)
            except (ValueError, yaml.YAMLError) as e:
                raise ApiError(400, "BadRequest", f"the body of the request was in an unknown format: {e}")
        if res.plural == "selfsubjectaccessreviews":
            return self._access_review(method, name, body)
        with self._lock:
            if name is None:
                if method == "GET" and query.get("watch", ["false"])[0] in ("1", "true"):
                    return 200, self._watch_open(res, ns, query)
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
            if method == "PATCH" and apply:
                code, applied = self._apply(res, ns, name, body, query, status_only=bool(sub))
                self._run_controllers()
                return code, applied
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
        self,
        name: str,
        node: str,
        driver: str,
        devices: list[dict],
        pool: str | None = None,
        generation: int = 1,
    ) -> dict:
        """Publish a ResourceSlice as a DRA driver's kubelet plugin would (spec.driver, nodeName,
        pool {name, generation, resourceSliceCount}, devices [{name, attributes, capacity}]). A
        driver that restarts republishes its pool with a higher ``generation``; until it deletes
        them, the older slices stay listed (and are ignored: :meth:`_slice_devices`)."""
        return self.publish_resource_slice(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
                    "devices": copy.deepcopy(devices),
                },
            }
        )

    def publish_resource_slice(self, obj: dict) -> dict:
        """Publish a whole ResourceSlice (e.g. a driver's real one, :func:`dra_sample`), checked as
        the API server checks a create (ValueError with the causes when it would be refused);
        server-owned metadata (uid, resourceVersion, creationTimestamp) is the fake's."""
        obj = copy.deepcopy(obj)
        errs = FieldErrors()
        self._validate_slice(obj.get("spec") or {}, errs)
        if errs:
            raise ValueError(f"ResourceSlice {obj.get('metadata', {}).get('name')}: {errs}")
        meta = obj.setdefault("metadata", {})
        obj["metadata"] = {
            "name": meta["name"],
            **{k: meta[k] for k in ("labels", "ownerReferences") if k in meta},
        }
        with self._lock:
            self._new_meta(obj)
            self._bump(obj)
            self._store[("resourceslices", "", obj["metadata"]["name"])] = obj
            return copy.deepcopy(obj)

    # -- validation and defaulting on create / update -------------------------------------------------
    _EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
    _TEMPLATE_KINDS = ("jobs", "deployments", "replicasets", "daemonsets")

    @staticmethod
    def _default_pod_spec(spec: dict, *, pod: bool) -> None:
        """pkg/apis/core/v1/defaults.go: SetDefaults_PodSpec gives ``restartPolicy: Always`` (pods and
        pod templates); SetDefaults_Pod — for Pod objects only, not templates — copies every limit
        without a request into ``requests`` ("If a container specifies its own memory limit, but does
        not specify a memory request, Kubernetes automatically assigns a memory request that matches
        the limit", docs "Assign Memory Resources to Containers and Pods"; the same for extended
        resources: docs "Schedule GPUs" — limits only, requests default to them)."""
        if not isinstance(spec, dict):
            return
        spec.setdefault("restartPolicy", "Always")
        if not pod:
            return
        for group in ("initContainers", "containers"):
            for c in spec.get(group) or []:
                res = c.get("resources") if isinstance(c, dict) else None
                if isinstance(res, dict) and isinstance(res.get("limits"), dict) and res["limits"]:
                    requests = res.setdefault("requests", {})
                    if isinstance(requests, dict):
                        for name, value in res["limits"].items():
                            requests.setdefault(name, value)

    @staticmethod
    def _default_device_requests(devices) -> None:
        """pkg/apis/resource/v1 defaults.go SetDefaults_ExactDeviceRequest (and DeviceSubRequest):
        ``allocationMode: ExactCount`` and, for ExactCount, ``count: 1``."""
        if not isinstance(devices, dict):
            return
        for req in devices.get("requests") or []:
            if not isinstance(req, dict):
                continue
            subs = [req.get("exactly")] + list(req.get("firstAvailable") or [])
            for sub in subs:
                if isinstance(sub, dict):
                    sub.setdefault("allocationMode", "ExactCount")
                    if sub["allocationMode"] == "ExactCount":
                        sub.setdefault("count", 1)

    def _apply_defaults(self, res: Resource, obj: dict) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        if res.plural == "pods":
            self._default_pod_spec(spec, pod=True)
        elif res.plural in self._TEMPLATE_KINDS:
            self._default_pod_spec((spec.get("template") or {}).get("spec"), pod=False)
        elif res.plural == "services":
            # pkg/apis/core/v1/defaults.go SetDefaults_Service / SetDefaults_ServicePort: type
            # ClusterIP, sessionAffinity None, port protocol TCP, targetPort = port; a ClusterIP
            # (not headless "None") gets an address from the service CIDR.
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            for port in spec.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    if "port" in port:
                        port.setdefault("targetPort", port["port"])
            if spec["type"] == "ClusterIP" and not spec.get("clusterIP"):
                n = self._rv % 65000
                spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
            if spec.get("clusterIP"):
                spec.setdefault("clusterIPs", [spec["clusterIP"]])
        elif res.plural == "resourceclaims":
            self._default_device_requests(spec.get("devices"))
        elif res.plural == "resourceclaimtemplates":
            self._default_device_requests((spec.get("spec") or {}).get("devices"))

    def _validate(self, res: Resource, obj: dict, *, create: bool) -> None:
        """422 Invalid with every cause, as the registries' Validate / ValidateUpdate answer."""
        errs = FieldErrors()
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        if create:
            if not name:
                errs.required("metadata.name", "name or generateName is required")
            else:
                for msg in _NAME_RULES.get(res.plural, dns1123_subdomain_errors)(name):
                    errs.invalid("metadata.name", name, msg)
        validate_labels(meta.get("labels"), "metadata.labels", errs)
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        if res.plural == "pods" and create:
            self._validate_pod_spec(spec, "spec", errs)
        elif res.plural in self._TEMPLATE_KINDS and create:
            template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
            # ValidatePodTemplateSpec: the template's labels (a Job's carry job-name = the Job's
            # name, which is why a Job name longer than 63 characters is refused), then its spec.
            validate_labels((template.get("metadata") or {}).get("labels"), "spec.template.labels", errs)
            tspec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
            self._validate_pod_spec(tspec, "spec.template.spec", errs)
            if res.plural == "jobs" and tspec.get("restartPolicy") not in ("OnFailure", "Never"):
                # pkg/apis/batch/validation/validation.go validateJobSpec.
                errs.not_supported(
                    "spec.template.spec.restartPolicy", tspec.get("restartPolicy"), ["OnFailure", "Never"]
                )
        elif res.plural == "nodes":
            self._validate_taints(spec.get("taints"), errs)
        elif res.plural == "resourceclaims":
            self._validate_device_claim(spec.get("devices"), "spec.devices", errs)
        elif res.plural == "resourceclaimtemplates":
            validate_labels(((spec.get("metadata") or {}).get("labels")), "spec.metadata.labels", errs)
            self._validate_device_claim((spec.get("spec") or {}).get("devices"), "spec.spec.devices", errs)
        elif res.plural == "deviceclasses":
            self._validate_selectors(spec.get("selectors"), "spec.selectors", errs)
        elif res.plural == "resourceslices":
            self._validate_slice(spec, errs)
        if errs:
            raise invalid_error(res, name, errs)

    def _validate_pod_spec(self, spec: dict, path: str, errs: FieldErrors) -> None:
        """pkg/apis/core/validation ValidatePodSpec, the parts Suanchi sends: containers (required,
        names DNS labels, unique), ``restartPolicy``, resources (ValidateResourceRequirements) and
        DRA claims (validatePodResourceClaims, validateResourceClaimNames)."""
        if not spec.get("containers"):
            errs.required(f"{path}.containers")
        claim_names: set[str] = set()
        for i, pc in enumerate(spec.get("resourceClaims") or []):
            p = f"{path}.resourceClaims[{i}]"
            pc = pc if isinstance(pc, dict) else {}
            cname = pc.get("name") or ""
            errs.unique_label_name(f"{p}.name", cname, claim_names, empty_too=True)
            has_claim, has_tpl = bool(pc.get("resourceClaimName")), bool(pc.get("resourceClaimTemplateName"))
            if not has_claim and not has_tpl:
                errs.invalid(p, pc, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`")
            elif has_claim and has_tpl:
                errs.invalid(
                    p,
                    pc,
                    "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified",
                )
            for field in ("resourceClaimName", "resourceClaimTemplateName"):
                for msg in dns1123_subdomain_errors(pc[field]) if pc.get(field) else []:
                    errs.invalid(f"{p}.{field}", pc[field], msg)
        if spec.get("restartPolicy") not in (None, "Always", "OnFailure", "Never"):
            errs.not_supported(
                f"{path}.restartPolicy", spec["restartPolicy"], ["Always", "OnFailure", "Never"]
            )
        seen: set[str] = set()
        for group in ("initContainers", "containers"):
            for i, c in enumerate(spec.get(group) or []):
                cp = f"{path}.{group}[{i}]"
                c = c if isinstance(c, dict) else {}
                cname = c.get("name") or ""
                errs.unique_label_name(f"{cp}.name", cname, seen)
                resources = c.get("resources") if isinstance(c.get("resources"), dict) else {}
                self._validate_resources(resources, f"{cp}.resources", errs)
                for j, ref in enumerate(resources.get("claims") or []):
                    rname = (ref or {}).get("name") if isinstance(ref, dict) else ref
                    if rname not in claim_names:
                        detail = (
                            "must be one of the names in pod.spec.resourceClaims: "
                            + ", ".join(sorted(claim_names))
                            if claim_names
                            else "must be one of the names in pod.spec.resourceClaims which is empty"
                        )
                        errs.not_found(f"{cp}.resources.claims[{j}]", rname, detail)

    @staticmethod
    def _validate_resources(resources: dict, path: str, errs: FieldErrors) -> None:
        """pkg/apis/core/validation ValidateResourceRequirements: quantities ≥ 0; extended resources
        (and hugepages) integers ("must be an integer") and — not overcommitable
        (helper.IsOvercommitAllowed) — a request equal to its limit, never a request without a limit."""

        def extended(name: str) -> bool:
            return _is_extended(name) or name.startswith("hugepages-")

        values: dict[str, dict[str, Decimal]] = {}
        for field in ("limits", "requests"):
            values[field] = {}
            for rname, q in (resources.get(field) or {}).items():
                fp = f"{path}.{field}[{rname}]"
                try:
                    value = parse_quantity(q)[0]
                except (ValueError, ArithmeticError):
                    errs.invalid(
                        fp,
                        q,
                        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                    continue
                values[field][rname] = value
                if value < 0:
                    errs.invalid(fp, q, "must be greater than or equal to 0")
                if extended(rname) and value != value.to_integral_value():
                    errs.invalid(fp, q, "must be an integer")
        limits, requests = values["limits"], values["requests"]
        raw_limits = resources.get("limits") or {}
        for rname, req in requests.items():
            fp = f"{path}.requests[{rname}]"
            shown = (resources.get("requests") or {}).get(rname)
            if rname in limits:
                if extended(rname) and req != limits[rname]:
                    errs.invalid(fp, shown, f"must be equal to {rname} limit of {raw_limits[rname]}")
                elif req > limits[rname]:
                    errs.invalid(
                        fp, shown, f"must be less than or equal to {rname} limit of {raw_limits[rname]}"
                    )
            elif extended(rname) and rname not in raw_limits:
                errs.required(f"{path}.limits", "Limit must be set for non overcommitable resources")

    def _validate_taints(self, taints, errs: FieldErrors) -> None:
        """pkg/apis/core/validation validateNodeTaints: key a qualified name, value a label value,
        effect one of the three, and unique by key and effect."""
        seen: set[tuple[str, str]] = set()
        for i, t in enumerate(taints or []):
            p = f"spec.taints[{i}]"
            t = t if isinstance(t, dict) else {}
            key = t.get("key") or ""
            for msg in qualified_name_errors(key):
                errs.invalid(f"{p}.key", key, msg)
            for msg in label_value_errors(str(t.get("value") or "")):
                errs.invalid(f"{p}.value", t.get("value"), msg)
            effect = t.get("effect") or ""
            if not effect:
                errs.required(f"{p}.effect")
            elif effect not in self._EFFECTS:
                errs.not_supported(f"{p}.effect", effect, self._EFFECTS)
            if (key, effect) in seen:
                errs.duplicate(p, t, "taints must be unique by key and effect pair")
            seen.add((key, effect))

    # -- resource.k8s.io/v1 validation (pkg/apis/resource/validation/validation.go) --------------------
    # Shapes: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-v1/
    # (DeviceClaim.requests[]: name, exactly {deviceClassName, selectors[].cel.expression,
    # allocationMode ExactCount | All, count} or firstAvailable[]), device-class-v1, resource-slice-v1.

    def _validate_selectors(self, selectors, path: str, errs: FieldErrors) -> None:
        for j, sel in enumerate(selectors or []):
            sp = f"{path}[{j}]"
            cel = (sel or {}).get("cel") if isinstance(sel, dict) else None
            if not isinstance(cel, dict):
                errs.required(f"{sp}.cel")
                continue
            expr = cel.get("expression")
            if not expr:
                errs.required(f"{sp}.cel.expression")
                continue
            try:
                cel_compile(expr)
            except CelError as e:
                errs.invalid(f"{sp}.cel.expression", expr, f"compilation failed: {e}")

    def _validate_exact(self, req: dict, path: str, errs: FieldErrors) -> None:
        cls = req.get("deviceClassName") or ""
        if not cls:
            errs.required(f"{path}.deviceClassName")
        for msg in dns1123_subdomain_errors(cls) if cls else []:
            errs.invalid(f"{path}.deviceClassName", cls, msg)
        self._validate_selectors(req.get("selectors"), f"{path}.selectors", errs)
        mode = req.get("allocationMode", "ExactCount")
        if mode == "ExactCount":
            count = req.get("count", 1)
            if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
                errs.invalid(f"{path}.count", count, "must be greater than zero")
        elif mode == "All":
            if req.get("count"):
                errs.invalid(
                    f"{path}.count", req["count"], "must not be specified when allocationMode is 'All'"
                )
        else:
            errs.not_supported(f"{path}.allocationMode", mode, ["All", "ExactCount"])

    def _validate_device_claim(self, devices, path: str, errs: FieldErrors) -> None:
        if devices is None:
            return
        if not isinstance(devices, dict):
            errs.invalid(path, devices, "must be an object")
            return
        names: set[str] = set()
        for i, req in enumerate(devices.get("requests") or []):
            rp = f"{path}.requests[{i}]"
            req = req if isinstance(req, dict) else {}
            rname = req.get("name") or ""
            errs.unique_label_name(f"{rp}.name", rname, names)
            exactly, first = req.get("exactly"), req.get("firstAvailable")
            if exactly is None and not first:
                errs.required(rp, "exactly one of `exactly` or `firstAvailable` is required")
            elif exactly is not None and first:
                errs.invalid(
                    rp,
                    None,
                    "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
                )
            elif exactly is not None:
                self._validate_exact(exactly if isinstance(exactly, dict) else {}, f"{rp}.exactly", errs)
            else:
                subnames: set[str] = set()
                for k, sub in enumerate(first):
                    sp = f"{rp}.firstAvailable[{k}]"
                    sub = sub if isinstance(sub, dict) else {}
                    sname = sub.get("name") or ""
                    errs.unique_label_name(f"{sp}.name", sname, subnames)
                    self._validate_exact(sub, sp, errs)
        for i, constraint in enumerate(devices.get("constraints") or []):
            for j, rname in enumerate((constraint or {}).get("requests") or []):
                if rname not in names:
                    errs.invalid(
                        f"{path}.constraints[{i}].requests[{j}]",
                        rname,
                        "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'",
                    )

    def _validate_slice(self, spec: dict, errs: FieldErrors) -> None:
        """ResourceSlice v1: driver (a DNS subdomain), pool {name, generation, resourceSliceCount ≥ 1},
        exactly one of nodeName / nodeSelector / allNodes / perDeviceNodeSelection, devices (≤ 128,
        names DNS labels, unique) whose attributes hold exactly one of int / bool / string / version."""
        driver = spec.get("driver") or ""
        if not driver:
            errs.required("spec.driver")
        for msg in dns1123_subdomain_errors(driver) if driver else []:
            errs.invalid("spec.driver", driver, msg)
        pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else None
        if pool is None:
            errs.required("spec.pool")
        else:
            if not pool.get("name"):
                errs.required("spec.pool.name")
            if not isinstance(pool.get("generation", 0), int) or pool.get("generation", 0) < 0:
                errs.invalid(
                    "spec.pool.generation", pool.get("generation"), "must be greater than or equal to 0"
                )
            if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] <= 0:
                errs.invalid(
                    "spec.pool.resourceSliceCount",
                    pool.get("resourceSliceCount"),
                    "must be greater than zero",
                )
        where = [f for f in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(f)]
        if len(where) != 1:
            errs.required(
                "spec",
                "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            )
        devices = spec.get("devices") or []
        counter_sets = spec.get("sharedCounters") or []
        if devices and counter_sets:  # the API reference: "Only one of Devices and SharedCounters"
            errs.invalid(
                "spec", "devices, sharedCounters", "only one of devices and sharedCounters may be set"
            )
        if len(counter_sets) > 8:
            errs.invalid("spec.sharedCounters", len(counter_sets), "must have at most 8 items")
        set_names: set[str] = set()
        for i, cs in enumerate(counter_sets):
            cp = f"spec.sharedCounters[{i}]"
            cs = cs if isinstance(cs, dict) else {}
            errs.unique_label_name(f"{cp}.name", cs.get("name") or "", set_names)
            counters = cs.get("counters") if isinstance(cs.get("counters"), dict) else {}
            if not counters:
                errs.required(f"{cp}.counters")
            for cname, counter in sorted(counters.items()):
                try:
                    parse_quantity((counter or {}).get("value"))
                except (ValueError, TypeError, AttributeError):
                    errs.invalid(f"{cp}.counters[{cname}].value", counter, "must be a quantity")
        if (
            any((d or {}).get("consumesCounters") for d in devices if isinstance(d, dict))
            and len(devices) > 64
        ):
            # "If any device uses taints or consumes counters the limit is 64."
            errs.invalid("spec.devices", len(devices), "must have at most 64 items")
        if len(devices) > 128:
            errs.invalid(
                "spec.devices", len(devices), "must have at most 128 items"
            )  # ResourceSliceMaxDevices
        names: set[str] = set()
        for i, dev in enumerate(devices):
            dp = f"spec.devices[{i}]"
            dev = dev if isinstance(dev, dict) else {}
            dname = dev.get("name") or ""
            errs.unique_label_name(f"{dp}.name", dname, names)
            for j, c in enumerate(dev.get("consumesCounters") or []):
                c = c if isinstance(c, dict) else {}
                if not c.get("counterSet"):
                    errs.required(f"{dp}.consumesCounters[{j}].counterSet")
                if not c.get("counters"):
                    errs.required(f"{dp}.consumesCounters[{j}].counters")
            for aname, value in sorted((dev.get("attributes") or {}).items()):
                ap = f"{dp}.attributes[{aname}]"
                if (
                    not isinstance(value, dict)
                    or len([k for k in value if k in ("int", "bool", "string", "version")]) != 1
                    or len(value) != 1
                ):
                    errs.invalid(ap, value, "exactly one value must be specified")

    # -- NamespaceLifecycle admission -----------------------------------------------------------------
    def _namespace_lifecycle(self, res: Resource, ns: str, name: str) -> None:
        """plugin/pkg/admission/namespace/lifecycle/admission.go: creating in a namespace that does
        not exist is 404 ``namespaces "x" not found``; in one that is being deleted (``Terminating``)
        403 Forbidden ``<resource> "<name>" is forbidden: unable to create new content in namespace
        <ns> because it is being terminated`` with a cause {reason NamespaceTerminating, field
        metadata.namespace} (k8s.io/api/core/v1 NamespaceTerminatingCause)."""
        namespace = self._store.get(("namespaces", "", ns))
        if namespace is None:
            raise _not_found(RESOURCES["namespaces"], ns)
        if namespace["metadata"].get("deletionTimestamp"):
            group, qual = qualified_resource(res)
            raise ApiError(
                403,
                "Forbidden",
                f'{qual} "{name}" is forbidden: unable to create new content in namespace {ns} '
                "because it is being terminated",
                {
                    "name": name,
                    "group": group,
                    "kind": res.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _sync_namespaces(self, force: bool = False) -> None:
        """pkg/controller/namespace (deletion.go): a namespace with ``deletionTimestamp`` stays
        ``Terminating`` while its content is deleted — pods gracefully (they keep it Terminating until
        the kubelet removed them), everything else at once — then the ``kubernetes`` finalizer goes
        and so does the namespace. ``force`` (the fake without controllers) removes it all at once."""
        for key, namespace in list(self._store.items()):
            if key[0] != "namespaces" or not namespace["metadata"].get("deletionTimestamp"):
                continue
            ns = key[2]
            for ckey in sorted(k for k in self._store if k[1] == ns and k[0] != "namespaces"):
                if ckey not in self._store:
                    continue
                if ckey[0] == "pods" and not force:
                    self._delete_pod_gracefully(ckey)
                elif ckey[0] == "pods":
                    self._remove_pod(ckey)
                else:
                    del self._store[ckey]
                    self._rv += 1
            if not any(k[1] == ns and k[0] != "namespaces" for k in self._store):
                del self._store[key]
                self._rv += 1

    # -- DRA: the resourceclaim controller and the scheduler's DynamicResources plugin -----------------
    def _pod_claims(self, pod: dict) -> list[tuple[str, str | None, bool]]:
        """(pod claim name, ResourceClaim name or None while not generated yet, from a template)."""
        spec = pod.get("spec") or {}
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        out = []
        for pc in spec.get("resourceClaims") or []:
            if pc.get("resourceClaimName"):
                out.append((pc["name"], pc["resourceClaimName"], False))
            else:
                out.append((pc["name"], statuses.get(pc["name"]), True))
        return out

    def _sync_resource_claims(self) -> None:
        """pkg/controller/resourceclaim/controller.go: for a pod's ``resourceClaimTemplateName`` it
        creates a ResourceClaim (generateName ``<pod>-<claim>-``, the template's metadata and spec,
        owned by the pod, annotation ``resource.kubernetes.io/pod-claim-name``) and records it in
        ``status.resourceClaimStatuses``; it drops from ``status.reservedFor`` the pods that are gone
        or done (Succeeded / Failed), deallocates a claim reserved for nobody, and deletes a generated
        claim whose pod is done (the garbage collector deletes it once the pod is gone)."""
        for key, pod in list(self._store.items()):
            if key[0] != "pods" or pod["metadata"].get("deletionTimestamp"):
                continue
            statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
            changed = False
            for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
                tname = pc.get("resourceClaimTemplateName")
                if not tname or any(s.get("name") == pc.get("name") for s in statuses):
                    continue
                template = self._store.get(("resourceclaimtemplates", key[1], tname))
                if template is None:
                    continue  # the controller retries; the scheduler reports the pod waiting
                base = f"{key[2]}-{pc['name']}"
                if len(base) > 57:
                    base = base[:57]
                claim = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {
                        "name": f"{base}-{_random_suffix()}",
                        "generateName": f"{base}-",
                        "namespace": key[1],
                        "labels": copy.deepcopy(
                            ((template.get("spec") or {}).get("metadata") or {}).get("labels") or {}
                        ),
                        "annotations": {
                            **copy.deepcopy(
                                ((template.get("spec") or {}).get("metadata") or {}).get("annotations") or {}
                            ),
                            "resource.kubernetes.io/pod-claim-name": pc["name"],
                        },
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": key[2],
                                "uid": pod["metadata"]["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
                }
                if not claim["metadata"]["labels"]:
                    del claim["metadata"]["labels"]
                self._new_meta(claim)
                self._store[("resourceclaims", key[1], claim["metadata"]["name"])] = claim
                statuses.append({"name": pc["name"], "resourceClaimName": claim["metadata"]["name"]})
                changed = True
            if changed:
                pod.setdefault("status", {})["resourceClaimStatuses"] = statuses
                self._bump(pod)
        pods_by_uid = {p["metadata"]["uid"]: p for k, p in self._store.items() if k[0] == "pods"}

        def done(pod: dict | None) -> bool:
            return pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

        for key, claim in list(self._store.items()):
            if key[0] != "resourceclaims":
                continue
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            keep = [r for r in reserved if not done(pods_by_uid.get(r.get("uid")))]
            if keep != reserved or (not keep and status.get("allocation")):
                if keep:
                    status["reservedFor"] = keep
                else:
                    status.pop("reservedFor", None)
                    status.pop("allocation", None)
                if status:
                    claim["status"] = status
                else:
                    claim.pop("status", None)
                self._bump(claim)
            owner = next(
                (r for r in claim["metadata"].get("ownerReferences") or [] if r.get("kind") == "Pod"), None
            )
            owner_pod = pods_by_uid.get(owner["uid"]) if owner else None
            if owner_pod is not None and done(owner_pod) and not keep:
                del self._store[key]
                self._rv += 1
            elif claim["metadata"].get("deletionTimestamp") and not keep:
                del self._store[key]  # finalizer resource.kubernetes.io/delete-protection released
                self._rv += 1

    def _devices_in_use(self, skip: set[tuple[str, str]] = frozenset()) -> set[tuple[str, str, str]]:
        used = set()
        for key, claim in self._store.items():
            if key[0] != "resourceclaims" or (key[1], key[2]) in skip:
                continue
            for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            ) or []:
                if not r.get("shareID"):  # a shared device's allocations count by capacity instead
                    used.add((r.get("driver"), r.get("pool"), r.get("device")))
        return used

    def _capacity_in_use(self, skip: set) -> dict[tuple[str, str, str], dict[str, Decimal]]:
        """Capacity the allocated claims (but ``skip``) consume of each shared device
        (``allowMultipleAllocations``): the sum of their results' ``consumedCapacity``."""
        used: dict[tuple[str, str, str], dict[str, Decimal]] = {}
        for key, claim in self._store.items():
            if key[0] != "resourceclaims" or (key[1], key[2]) in skip:
                continue
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for r in (allocation.get("devices") or {}).get("results") or []:
                mine = used.setdefault((r.get("driver"), r.get("pool"), r.get("device")), {})
                for cap, q in (r.get("consumedCapacity") or {}).items():
                    mine[cap] = mine.get(cap, Decimal(0)) + parse_quantity(q)[0]
        return used

    @staticmethod
    def _selectors_match(selectors, driver: str, device: dict, what: str) -> bool:
        """structured/allocator.go selectorsMatch: every selector must be true; a CEL runtime error
        fails the allocation (CelError with the allocator's "CEL runtime error")."""
        env = device_env(driver, device)
        for i, sel in enumerate(selectors or []):
            expr = ((sel or {}).get("cel") or {}).get("expression", "")
            try:
                if cel_evaluate(cel_compile(expr), env) is not True:
                    return False
            except CelError as e:
                raise CelError(f"{what}: selector #{i}: CEL runtime error: {e}") from None
        return True

    def _slice_devices(self, node: str) -> list[tuple[str, str, dict]]:
        """(driver, pool, device) of the ResourceSlices of ``node`` (or ``allNodes``), from the
        highest generation of each pool only: resource.k8s.io/v1 ResourcePool.generation (k8s.io/api
        resource/v1 types.go) — "Consumers of ResourceSlices should only consider resources from the
        pool with the highest generation number"."""
        devices = []
        for spec in self._newest_slices(node):
            for dev in spec.get("devices") or []:
                devices.append((spec.get("driver"), (spec.get("pool") or {}).get("name"), dev))
        return devices

    def _shared_counters(self, node: str) -> dict[tuple[str, str], dict[tuple[str, str], Decimal]]:
        """(driver, pool) -> (counter set, counter) -> value, from the pools' newest slices."""
        pools: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
        for spec in self._newest_slices(node):
            mine = pools.setdefault((spec.get("driver"), (spec.get("pool") or {}).get("name")), {})
            for cs in spec.get("sharedCounters") or []:
                for cname, counter in (cs.get("counters") or {}).items():
                    mine[(cs.get("name"), cname)] = parse_quantity(counter["value"])[0]
        return pools

    def _counters_in_use(self, node: str, skip: set) -> dict[tuple[str, str], dict[tuple[str, str], Decimal]]:
        """(driver, pool) -> (counter set, counter) -> what the allocated claims (but ``skip``) consume."""
        by_name = {(d, p, dev.get("name")): dev for d, p, dev in self._slice_devices(node)}
        used: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
        for key, claim in self._store.items():
            if key[0] != "resourceclaims" or (key[1], key[2]) in skip:
                continue
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for r in (allocation.get("devices") or {}).get("results") or []:
                dev = by_name.get((r.get("driver"), r.get("pool"), r.get("device")))
                mine = used.setdefault((r.get("driver"), r.get("pool")), {})
                for ck, q in _counter_consumption(dev or {}).items():
                    mine[ck] = mine.get(ck, Decimal(0)) + q
        return used

    def _newest_slices(self, node: str) -> list[dict]:
        """The specs of the ResourceSlices of ``node`` (or ``allNodes``) of each pool's newest generation."""
        slices = []
        for (plural, _, _sname), rslice in sorted(self._store.items()):
            spec = rslice.get("spec") or {}
            if plural == "resourceslices" and (spec.get("nodeName") == node or spec.get("allNodes")):
                slices.append(spec)
        newest: dict[tuple, int] = {}
        for spec in slices:
            pool = spec.get("pool") or {}
            key = (spec.get("driver"), pool.get("name"))
            newest[key] = max(newest.get(key, 0), pool.get("generation") or 0)
        return [
            spec
            for spec in slices
            if ((spec.get("pool") or {}).get("generation") or 0)
            >= newest[(spec.get("driver"), (spec.get("pool") or {}).get("name"))]
        ]

    def _allocate_on(self, node: str, claims: list[tuple[str, dict]], in_use: set) -> list[dict]:
        """structured/allocator.go, reduced: each request takes ``count`` (ExactCount) or every
        (All) matching device from the ResourceSlices of ``node`` (or ``allNodes``), a device never
        twice and never one another claim holds; the DeviceClass's selectors and the request's must
        all be true; ``firstAvailable`` takes the first subrequest that fits. Returns the
        allocations in claim order; CelError (or ValueError with the reason) when it cannot."""
        taken = set(in_use)
        devices = self._slice_devices(node)
        skip = {(c.get("metadata", {}).get("namespace"), n) for n, c in claims}
        consumed = self._capacity_in_use(skip)
        counters = self._shared_counters(node)
        counters_used = self._counters_in_use(node, skip)
        allocations = []
        for claim_name, claim in claims:
            results, configs = [], []
            for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                options = (
                    [(req["name"], req["exactly"])]
                    if req.get("exactly")
                    else [(f"{req['name']}/{s['name']}", s) for s in req.get("firstAvailable") or []]
                )
                picked = None
                for rname, sub in options:
                    cls = self._store.get(("deviceclasses", "", sub.get("deviceClassName", "")))
                    if cls is None:
                        raise ValueError(
                            f"claim {claim_name}, request {rname}: device class {sub.get('deviceClassName')} does not exist"
                        )
                    matching = [
                        (d, p, dev)
                        for d, p, dev in devices
                        if self._selectors_match(
                            (cls.get("spec") or {}).get("selectors"),
                            d,
                            dev,
                            f"class {cls['metadata']['name']}",
                        )
                        and self._selectors_match(sub.get("selectors"), d, dev, f"claim {claim_name}")
                    ]
                    wanted = (sub.get("capacity") or {}).get("requests") or {}
                    free = [
                        (d, p, dev)
                        for d, p, dev in matching
                        if (d, p, dev.get("name")) not in taken
                        and _consumable_fits(dev, wanted, consumed.get((d, p, dev.get("name")), {}))
                        and _counters_fit(dev, counters.get((d, p)), counters_used.get((d, p), {}))
                    ]
                    if sub.get("allocationMode") == "All":
                        chosen = free if matching and len(free) == len(matching) else None
                    else:
                        count = sub.get("count", 1)
                        chosen = _first_fitting(free, count, counters, counters_used)
                    if chosen:
                        picked = (rname, chosen, cls)
                        break
                if picked is None:
                    raise ValueError(f"claim {claim_name}, request {req.get('name')}: not enough devices")
                rname, chosen, cls = picked
                wanted = (sub.get("capacity") or {}).get("requests") or {}
                for d, p, dev in chosen:
                    result = {"request": rname, "driver": d, "pool": p, "device": dev.get("name")}
                    if dev.get("allowMultipleAllocations"):
                        # KEP-5075: a shared device's result carries a shareID and consumedCapacity.
                        use = _consumed_capacity(dev, wanted)
                        mine = consumed.setdefault((d, p, dev.get("name")), {})
                        for cap, q in use.items():
                            mine[cap] = mine.get(cap, Decimal(0)) + q
                        result["shareID"] = str(uuid.uuid4())
                        result["consumedCapacity"] = {
                            cap: _quantity_text(q, dev["capacity"][cap]["value"]) for cap, q in use.items()
                        }
                    else:
                        taken.add((d, p, dev.get("name")))
                    mine = counters_used.setdefault((d, p), {})
                    for ck, q in _counter_consumption(dev).items():
                        mine[ck] = mine.get(ck, Decimal(0)) + q
                    results.append(result)
                for cfg in (cls.get("spec") or {}).get("config") or []:
                    configs.append({"source": "FromClass", "requests": [rname], **copy.deepcopy(cfg)})
            for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
                configs.append({"source": "FromClaim", **copy.deepcopy(cfg)})
            allocation = {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
            if configs:
                allocation["devices"]["config"] = configs
            allocations.append(allocation)
        return allocations

    @staticmethod
    def _allocated_node(claim: dict) -> str | None:
        terms = (
            (((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}).get(
                "nodeSelectorTerms"
            )
        ) or []
        for term in terms:
            for f in term.get("matchFields") or []:
                if f.get("key") == "metadata.name" and f.get("values"):
                    return f["values"][0]
        return None

    def _schedule_dra(self) -> None:
        """kube-scheduler with the DynamicResources plugin (pkg/scheduler/framework/plugins/
        dynamicresources): an unbound pod with ``spec.resourceClaims`` waits until its claims exist;
        it is bound to the first node (in name order, honouring ``nodeName`` / ``nodeSelector`` and
        NoSchedule / NoExecute taints) where every unallocated claim can be allocated and every
        allocated one is available; the claims get ``status.allocation`` and the pod in
        ``status.reservedFor``. Otherwise the pod stays Pending with PodScheduled False
        (Unschedulable) and a ``FailedScheduling`` Warning event from default-scheduler."""
        nodes = sorted((k[2], n) for k, n in self._store.items() if k[0] == "nodes")
        for key, pod in list(self._store.items()):
            spec = pod.get("spec") or {}
            if (
                key[0] != "pods"
                or not spec.get("resourceClaims")
                or pod["metadata"].get("deletionTimestamp")
                or (pod.get("status") or {}).get("phase") != "Pending"
                or self._bound(pod)
            ):
                continue
            reason = None
            claims: list[tuple[str, dict]] = []
            for pcname, cname, _generated in self._pod_claims(pod):
                if cname is None:
                    reason = f'waiting for dynamic resource controller to create the resourceclaim "{key[2]}-{pcname}"'
                    break
                claim = self._store.get(("resourceclaims", key[1], cname))
                if claim is None:
                    reason = f'resourceclaim "{cname}" not found'
                    break
                claims.append((cname, claim))
            unschedulable = 0
            if reason is None:
                host = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
                selector = spec.get("nodeSelector") or {}
                failures = []
                for name, node in nodes:
                    labels = node["metadata"].get("labels") or {}
                    if (host and name != host) or any(labels.get(k) != v for k, v in selector.items()):
                        continue
                    if any(
                        t.get("effect") in ("NoSchedule", "NoExecute")
                        and not any(self._tolerates(tol, t) for tol in spec.get("tolerations") or [])
                        for t in (node.get("spec") or {}).get("taints") or []
                    ):
                        continue
                    pending = [(n, c) for n, c in claims if not (c.get("status") or {}).get("allocation")]
                    if any(
                        self._allocated_node(c) not in (None, name)
                        for n, c in claims
                        if (c.get("status") or {}).get("allocation")
                    ):
                        unschedulable += 1
                        continue
                    try:
                        allocations = self._allocate_on(
                            name, pending, self._devices_in_use({(key[1], n) for n, _ in pending})
                        )
                    except (ValueError, CelError) as e:
                        failures.append(str(e))
                        unschedulable += 1
                        continue
                    for (_n, claim), allocation in zip(pending, allocations, strict=True):
                        claim.setdefault("status", {})["allocation"] = allocation
                    for _n, claim in claims:
                        reserved = claim.setdefault("status", {}).setdefault("reservedFor", [])
                        if not any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
                            reserved.append(
                                {"resource": "pods", "name": key[2], "uid": pod["metadata"]["uid"]}
                            )
                        self._bump(claim)
                    spec["nodeName"] = name
                    self._record_scheduled(pod, name)
                    pod["status"]["conditions"] = [
                        c for c in pod["status"].get("conditions") or [] if c.get("type") != "PodScheduled"
                    ] + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]
                    self._kubelet_prepare(pod, claims)
                    self._bump(pod)
                    break
                else:
                    total = len(nodes)
                    reason = f"0/{total} nodes are available: " + (
                        f"{unschedulable} cannot allocate all claims."
                        if unschedulable
                        else f"{total} node(s) didn't match Pod's node affinity/selector."
                    )
                    if failures:
                        reason += f" ({failures[0]})"
            if reason is not None:
                conditions = pod["status"].get("conditions") or []
                current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
                if current is None or current.get("message") != reason:
                    pod["status"]["conditions"] = [
                        c for c in conditions if c.get("type") != "PodScheduled"
                    ] + [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": reason,
                            "lastTransitionTime": _now(),
                        }
                    ]
                    self._bump(pod)
                    self._record_event(pod, "FailedScheduling", reason, "default-scheduler")

    # The NVIDIA DRA driver's check of a claim's sharing configuration, read from its source (not run):
    # sigs.k8s.io/dra-driver-nvidia-gpu (formerly NVIDIA/k8s-dra-driver-gpu) @
    # 22407113785e78c7763b4637689a201eb39c6199. cmd/gpu-kubelet-plugin/device_state.go prepareDevices
    # normalises and validates each opaque config of the allocation ("error validating GPU config: %w");
    # api/nvidia.com/resource/v1beta1/validate.go validateSharingStrategy refuses a strategy whose gate is
    # off. A GpuConfig without ``sharing`` is valid with the gates off (gpuconfig.go Normalize / Validate).
    NVIDIA_SHARING_GATES = {"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}

    def _nvidia_prepare_error(self, claim: dict) -> str:
        """The driver's error for ``claim`` (its error chain from DeviceState.Prepare inward), "" if none."""
        gates = self.nvidia_dra_feature_gates or {}
        devices = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        results = [r for r in devices.get("results") or [] if r.get("driver") == "gpu.nvidia.com"]
        for cfg in devices.get("config") or []:
            opaque = cfg.get("opaque") or {}
            params = opaque.get("parameters") or {}
            if opaque.get("driver") != "gpu.nvidia.com" or params.get("kind") not in (
                "GpuConfig",
                "MigDeviceConfig",
            ):
                continue
            if not any(not cfg.get("requests") or r.get("request") in cfg["requests"] for r in results):
                continue
            strategy = (params.get("sharing") or {}).get("strategy")
            if strategy is None:
                continue
            gate = self.NVIDIA_SHARING_GATES.get(strategy)
            if gate is None:
                error = (
                    f"unknown GPU sharing strategy: {strategy}, "
                    "supported GPU sharing strategies: TimeSlicing, MPS"
                )
            elif gates.get(gate):
                continue
            else:
                error = (
                    f'"{strategy}" is selected as the GPU sharing strategy, '
                    f'but the "{gate}" feature gate is not enabled'
                )
            return f"prepare devices failed: error validating GPU config: {error}"
        return ""

    def _kubelet_prepare(self, pod: dict, claims: list[tuple[str, dict]]) -> None:
        """The kubelet's NodePrepareResources for a pod just bound (only with
        :attr:`nvidia_dra_feature_gates` set). A refusal keeps the pod Pending with its containers
        waiting in ContainerCreating and a ``FailedPrepareDynamicResources`` Warning from the kubelet,
        its message the kubelet's wrapping (pkg/kubelet/kuberuntime "Failed to prepare dynamic
        resources: %v", pkg/kubelet/cm/dra/manager.go "NodePrepareResources failed for ResourceClaim
        %s: %s", as a real event of this driver shows them) around the driver's
        ("error preparing devices for claim <ns>/<name>:<uid>: %w", cmd/gpu-kubelet-plugin/driver.go)."""
        if self.nvidia_dra_feature_gates is None:
            return
        meta = pod["metadata"]
        ns = meta.get("namespace", "")
        for cname, claim in claims:
            error = self._nvidia_prepare_error(claim)
            if not error:
                continue
            uid = (claim.get("metadata") or {}).get("uid", "")
            message = (
                "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed "
                f"for ResourceClaim {cname}: error preparing devices for claim {ns}/{cname}:{uid}: {error}"
            )
            self._prepare_failed[(ns, meta["name"])] = message
            pod["status"]["containerStatuses"] = [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
                for c in (pod.get("spec") or {}).get("containers") or []
            ]
            self._record_event(pod, "FailedPrepareDynamicResources", message, "kubelet")
            return

    @staticmethod
    def _bound(pod: dict) -> bool:
        return any(
            c.get("type") == "PodScheduled" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )

    def _get(self, res: Resource, ns: str, name: str) -> dict:
        obj = self._store.get((res.plural, ns, name))
        if obj is None:
            raise _not_found(res, name)
        return obj

    def _list(self, res: Resource, ns: str, query: dict) -> dict:
        """A ``<Kind>List``: items without ``kind`` / ``apiVersion`` (the list carries them, as the
        API's JSON does), ``metadata.resourceVersion``; ``limit`` / ``continue`` paging
        (https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks):
        every page comes from the snapshot of the first one (etcd serves them at its revision), the
        token is base64 JSON {v, rv, start} as the apiserver's storage encodes it, and a token whose
        revision was compacted (:meth:`compact`; the oldest of :attr:`list_snapshots_kept`) answers
        410 Expired. ``remainingItemCount`` only without selectors."""
        self._watch_flush()  # deletions get their resourceVersion: the list's version covers them
        reqs = parse_label_selector(query.get("labelSelector", [""])[0])
        fsel = query.get("fieldSelector", [""])[0]
        try:
            limit = int(query.get("limit", ["0"])[0] or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", f"limit: Invalid value: {query['limit'][0]!r}") from None
        token = query.get("continue", [""])[0]
        requested_rv = query.get("resourceVersion", [""])[0]
        if requested_rv and requested_rv != "0" and not token:
            if not requested_rv.isdigit():
                raise ApiError(400, "BadRequest", f"resourceVersion: Invalid value: {requested_rv!r}")
            if int(requested_rv) > self._rv:
                # storage/cacher: a resourceVersion the server has not reached yet.
                raise ApiError(
                    504, "Timeout", f"Too large resource version: {requested_rv}, current: {self._rv}"
                )
            if (
                query.get("resourceVersionMatch", [""])[0] == "Exact"
                and int(requested_rv) < self._compacted_rv
            ):
                raise ApiError(
                    410, "Expired", f"too old resource version: {requested_rv} ({self._compacted_rv})"
                )
        if token:
            try:
                decoded = json.loads(base64.b64decode(token.encode() + b"==="))
                rv, start = int(decoded["rv"]), str(decoded["start"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "BadRequest", "continue key is not valid: illegal base64 data") from None
            snapshot = self._list_snapshots.get((rv, res.plural, ns))
            if snapshot is None:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You "
                    "can start a new list without the continue parameter, or use the continue token in "
                    "this response to retrieve the remainder of the results. Continuing with the provided "
                    "token results in an inconsistent list - objects that were created, modified, or "
                    "deleted between the time the first chunk was returned and now may show up in the list.",
                )
        else:
            rv, start = self._rv, ""
            snapshot = [
                (f"{ons}/{oname}", o)
                for (p, ons, oname), o in sorted(self._store.items())
                if p == res.plural and (not ns or ons == ns)
            ]
            if limit > 0:
                snapshot = [(k, copy.deepcopy(o)) for k, o in snapshot]
        matched = [
            (k, o)
            for k, o in snapshot
            if k > start and labels_match(o["metadata"].get("labels") or {}, reqs) and _field_match(o, fsel)
        ]
        page = matched[:limit] if limit > 0 else matched
        meta: dict = {"resourceVersion": str(rv)}
        if limit > 0 and len(matched) > limit:
            if (rv, res.plural, ns) not in self._list_snapshots:
                self._list_snapshots[(rv, res.plural, ns)] = snapshot
                while len(self._list_snapshots) > self.list_snapshots_kept:
                    self._list_snapshots.pop(next(iter(self._list_snapshots)))
            last = page[-1][0]
            meta["continue"] = (
                base64.b64encode(json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": last}).encode())
                .decode()
                .rstrip("=")
            )
            if not reqs and not fsel:
                meta["remainingItemCount"] = len(matched) - limit
        items = []
        for _k, o in page:
            item = copy.deepcopy(o)
            item.pop("kind", None)
            item.pop("apiVersion", None)
            items.append(item)
        return {"apiVersion": res.api_version, "kind": f"{res.kind}List", "metadata": meta, "items": items}

    def compact(self) -> None:
        """etcd compaction (the apiserver compacts every 5 minutes): older revisions are gone, so a
        continue token or an Exact resourceVersion from before now answers 410 Expired, and so does a
        watch from before now (the watch history is emptied: a watch served from etcd cannot start
        before its compacted revision, one served from the watch cache not before its window)."""
        with self._lock:
            self._watch_flush()
            self._list_snapshots.clear()
            self._compacted_rv = self._rv
            self._history.clear()
            self._history_rvs.clear()
            self._history_start = self._rv

    # -- watch -----------------------------------------------------------------------------------
    # https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes

    def _watch_key(self, obj: dict) -> tuple[str, str, str] | None:
        plural = KIND_TO_PLURAL.get(obj.get("kind", ""))
        if plural is None:
            return None
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace", "") if RESOURCES[plural].namespaced else ""
        return (plural, ns or "", meta.get("name", ""))

    def _record(self, key: tuple[str, str, str], type_: str, obj: dict, prev: dict | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._history.append((rv, key[0], key[1], type_, obj, prev))
        self._history_rvs.append(rv)
        if type_ == "DELETED":
            self._watch_last.pop(key, None)
        else:
            self._watch_last[key] = obj
        if len(self._history) > self.watch_history_size * 2:
            drop = len(self._history) - self.watch_history_size
            self._history_start = self._history_rvs[drop - 1]
            del self._history[:drop]
            del self._history_rvs[:drop]

    def _watch_flush(self) -> None:
        """Turn the writes since the last flush into watch events, in resourceVersion order: a new
        key ADDED, a new resourceVersion MODIFIED, a removed key DELETED with the object's last
        state and a resourceVersion of its own (etcd gives the delete a revision; the apiserver
        sets it on the deleted object: storage/etcd3/watcher.go). Several writes of one object
        between two flushes are one event with its latest state (as a watcher falling behind sees,
        never an older state after a newer one)."""
        store = self._store
        keys = set(store.touched) | set(store.removed)
        for obj in self._bumped:
            key = self._watch_key(obj)
            if key is not None:
                keys.add(key)
        removed = store.removed
        store.touched, store.removed, self._bumped = set(), {}, []

        def version(obj: dict) -> int:
            rv = str(obj["metadata"].get("resourceVersion") or "")
            return int(rv) if rv.isdigit() else 0

        def fresh(obj: dict) -> int:
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            return self._rv

        changed, gone, recreated = [], [], []
        for key in keys:
            cur, last = store.get(key), self._watch_last.get(key)
            if last is not None and (
                cur is None or cur["metadata"].get("uid") != last["metadata"].get("uid")
            ):
                gone.append((key, last))
                if cur is not None:  # removed and created again under its name: DELETED, then ADDED
                    recreated.append((key, cur))
                continue
            if cur is not None and (last is None or version(last) != version(cur)):
                changed.append((version(cur), key, cur, last))
        floor = self._history_rvs[-1] if self._history_rvs else self._history_start
        # Objects written into the store without a new version (a test's or a benchmark's setup) get
        # one after the others.
        changed.sort(key=lambda c: (c[0] <= floor, c[0]))
        for rv, key, cur, last in changed:
            if rv <= floor:
                fresh(cur)
            self._record(key, "MODIFIED" if last is not None else "ADDED", copy.deepcopy(cur), last)
        for key, last in sorted(gone):
            final = removed.get(key)
            final = copy.deepcopy(
                final
                if final is not None and final["metadata"].get("uid") == last["metadata"].get("uid")
                else last
            )
            fresh(final)
            self._record(key, "DELETED", final, last)
        for key, cur in sorted(recreated, key=lambda kc: kc[0]):
            fresh(cur)  # the new object's version comes after its predecessor's deletion
            self._record(key, "ADDED", copy.deepcopy(cur), None)

    def _watch_matches(self, watch: _WatchStream, obj: dict | None) -> bool:
        return (
            obj is not None
            and labels_match(obj["metadata"].get("labels") or {}, watch.reqs)
            and _field_match(obj, watch.fsel)
        )

    @staticmethod
    def _wire(obj: dict, rv: int | None = None) -> dict:
        out = copy.deepcopy(obj)
        if rv is not None:
            out["metadata"]["resourceVersion"] = str(rv)
        return out

    def _watch_open(self, res: Resource, ns: str, query: dict) -> _WatchStream:
        """Validate a watch request and fix where it starts (Kubernetes API concepts, "Semantics for
        watch"): ``resourceVersion`` unset ("Get State and Start at Most Recent") or "0" ("Start at
        Any"; the most recent here) send synthetic ADDED events for the objects at the current
        version first; a version N ("Start at Exact") every change after N, or 410 Expired when N
        is older than the history kept (storage/cacher/watch_cache.go: "too old resource version")."""
        if query.get("sendInitialEvents"):
            raise ApiError(400, "BadRequest", "sendInitialEvents is not implemented by the fake API server")
        reqs = parse_label_selector(query.get("labelSelector", [""])[0])
        fsel = query.get("fieldSelector", [""])[0]
        _field_match({"metadata": {}}, fsel)  # a malformed field selector is a 400 now
        raw_timeout = query.get("timeoutSeconds", [""])[0]
        try:
            timeout = float(int(raw_timeout)) if raw_timeout else self.watch_default_timeout
        except ValueError:
            raise ApiError(400, "BadRequest", f"timeoutSeconds: Invalid value: {raw_timeout!r}") from None
        bookmarks = query.get("allowWatchBookmarks", ["false"])[0] in ("1", "true")
        requested = query.get("resourceVersion", [""])[0]
        if requested and not requested.isdigit():
            raise ApiError(400, "BadRequest", f"resourceVersion: Invalid value: {requested!r}")
        self._watch_flush()
        now = time.monotonic()
        watch = _WatchStream(res, ns, reqs, fsel, self._rv, [], now + timeout, bookmarks)
        if bookmarks:
            watch.next_bookmark = next_bookmark_time(now, watch.deadline, self.bookmark_frequency_s)
        if requested in ("", "0"):
            watch.initial = [
                self._wire(o)
                for (p, ons, _), o in sorted(self._store.items())
                if p == res.plural and (not ns or ons == ns) and self._watch_matches(watch, o)
            ]
        elif int(requested) < self._history_start:
            watch.error = self._expired(int(requested))
        elif int(requested) > self._rv:
            # storage/cacher: a version the server has not reached yet (it waits 3 s, then gives up).
            watch.error = ApiError(
                504, "Timeout", f"Too large resource version: {requested}, current: {self._rv}"
            ).status()
        else:
            watch.cursor = int(requested)
        return watch

    def _header_delay(self, method: str, path: str) -> float:
        """``header_delay_s`` for a list or a watch (a GET on a collection), else 0."""
        if method != "GET" or not self.header_delay_s:
            return 0.0
        m = _PATH_RE.match(path)
        collection = m is not None and m.group("name") is None and m.group("plural") in RESOURCES
        return self.header_delay_s if collection else 0.0

    def _expired(self, rv: int) -> dict:
        return ApiError(410, "Expired", f"too old resource version: {rv} ({self._history_start})").status()

    def _watch_next(self, watch: _WatchStream) -> tuple[list[dict], dict | None]:
        """The events of ``watch`` after its cursor, filtered as the cacher does
        (storage/cacher/cache_watcher.go convertToWatchEvent): the object matching now and before
        → MODIFIED; now only → ADDED; before only → DELETED (the previous state, at the event's
        version). A cursor that fell out of the history (compacted) → a 410 ERROR."""
        import bisect

        with self._lock:
            self._watch_flush()
            if watch.cursor < self._history_start:
                return [], self._expired(watch.cursor)
            events = []
            start = bisect.bisect_right(self._history_rvs, watch.cursor)
            for rv, plural, ns, type_, obj, prev in self._history[start:]:
                watch.cursor = rv
                if plural != watch.res.plural or (watch.ns and ns != watch.ns):
                    continue
                now = type_ != "DELETED" and self._watch_matches(watch, obj)
                before = self._watch_matches(watch, prev)
                if now:
                    events.append({"type": "MODIFIED" if before else "ADDED", "object": self._wire(obj)})
                elif before:
                    events.append({"type": "DELETED", "object": self._wire(prev, rv)})
            watch.cursor = self._rv  # every change up to now is in the history (just flushed)
            return events, None

    def _bookmark(self, watch: _WatchStream) -> dict:
        """A BOOKMARK: only the kind and ``metadata.resourceVersion`` (the version up to which every
        change was sent) are meaningful (api-concepts, "Watch bookmarks")."""
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": watch.res.kind,
                "apiVersion": watch.res.api_version,
                "metadata": {"resourceVersion": str(watch.cursor)},
            },
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

    def _invalid(
        self, res: Resource, name: str, field: str, message: str, reason: str = "FieldValueInvalid"
    ) -> ApiError:
        return invalid_error(res, name, [{"reason": reason, "message": message, "field": field}])

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
        if res.plural in ("resourceclaims", "resourceclaimtemplates"):
            # pkg/apis/resource/validation ValidateResourceClaimUpdate / ...TemplateUpdate: spec is
            # immutable.
            return ["spec"] if new_spec != old_spec else []
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
            value = json.dumps(
                new.get("spec") if f == "spec" else (new.get("spec") or {}).get(f), sort_keys=True
            )
            if len(value) > 120:
                value = value[:117] + "..."
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {value}: field is immutable",
                    "field": "spec" if f == "spec" else f"spec.{f}",
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

    # -- pod events and logs (issue 21) ------------------------------------------------------------
    def _record_scheduled(self, pod: dict, node: str) -> None:
        """kube-scheduler's event when it binds a pod (pkg/scheduler/schedule_one.go: reason
        ``Scheduled``, "Successfully assigned <ns>/<pod> to <node>", Normal)."""
        meta = pod["metadata"]
        if not meta.get("uid"):
            return
        self._record_event(
            pod,
            "Scheduled",
            f"Successfully assigned {meta.get('namespace', '')}/{meta['name']} to {node}",
            "default-scheduler",
            "Normal",
        )

    def _record_kubelet_events(self, pod: dict, what: str) -> None:
        """The kubelet's container events (reasons of pkg/kubelet/events/event.go, messages of
        pkg/kubelet/images and pkg/kubelet/kuberuntime): on start ``Pulled`` ("Container image ...
        already present on machine"), ``Created`` ("Created container: <name>"), ``Started``
        ("Started container <name>"); on a graceful delete of running containers ``Killing``
        ("Stopping container <name>"); on a crash loop ``BackOff`` (Warning, "Back-off restarting
        failed container <name> in pod <pod>_<ns>(<uid>)")."""
        meta = pod["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        running = {
            cs.get("name")
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
            if "running" in (cs.get("state") or {})
        }
        for c in (pod.get("spec") or {}).get("containers", []):
            cname = c.get("name", "")
            if what == "Started":
                self._record_event(
                    pod,
                    "Pulled",
                    f'Container image "{c.get("image", "")}" already present on machine',
                    "kubelet",
                    "Normal",
                )
                self._record_event(pod, "Created", f"Created container: {cname}", "kubelet", "Normal")
                self._record_event(pod, "Started", f"Started container {cname}", "kubelet", "Normal")
            elif what == "Killing" and cname in running:
                self._record_event(pod, "Killing", f"Stopping container {cname}", "kubelet", "Normal")
            elif what == "BackOff":
                self._record_event(
                    pod,
                    "BackOff",
                    f"Back-off restarting failed container {cname} in pod {name}_{ns}({meta['uid']})",
                    "kubelet",
                )

    def set_pod_log(
        self, namespace: str, name: str, text: str, container: str | None = None, previous: bool = False
    ) -> None:
        """What a container wrote (``container`` defaults to the pod's first one); ``previous`` =
        the log of its last terminated instance (``kubectl logs --previous``)."""
        with self._lock:
            pod = self._store.get(("pods", namespace, name))
            if pod is None:
                raise KeyError(f"no pod {namespace}/{name}")
            if container is None:
                container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", "")
            self._logs[(namespace, name, container, previous)] = text

    def _pod_log(self, method: str, ns: str, name: str, query: dict) -> tuple:
        """GET /api/v1/namespaces/{ns}/pods/{name}/log, text/plain (Kubernetes API reference, Pod v1,
        "read log of the specified Pod"; query PodLogOptions ``container``, ``tailLines``,
        ``limitBytes``, ``previous``; ``follow``, ``sinceSeconds``, ``sinceTime``, ``timestamps`` are
        not implemented and ignored). In kube-apiserver's order: 404 for a missing pod; 422 for
        invalid options (pkg/apis/core/validation ValidatePodLogOptions); the container
        (pkg/registry/core/pod/strategy.go LogLocation: the only one, else 400 "a container name must
        be specified for pod <pod>, choose one of: [<names>]", 400 "container <c> is not valid for
        pod <pod>"); an unbound pod has no log location, an empty answer; then the kubelet
        (pkg/kubelet/kubelet_pods.go validateContainerLogStatus): 400 "previous terminated container
        ... not found", "container ... is waiting to start: <reason>". ``tailLines`` keeps the last
        lines, then ``limitBytes`` stops after that many bytes."""
        if method != "GET":
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"the server does not allow this method on the requested resource ({method})",
            )
        with self._lock:
            pod = copy.deepcopy(self._get(RESOURCES["pods"], ns, name))
            text = None

            def number(key: str) -> int | None:
                raw = query.get(key, [""])[0]
                if raw == "":
                    return None
                try:
                    return int(raw)
                except ValueError:
                    raise ApiError(
                        400, "BadRequest", f'strconv.ParseInt: parsing "{raw}": invalid syntax'
                    ) from None

            tail, limit = number("tailLines"), number("limitBytes")
            errs = FieldErrors()
            if tail is not None and tail < 0:
                errs.invalid("tailLines", tail, "must be greater than or equal to 0")
            if limit is not None and limit < 1:
                errs.invalid("limitBytes", limit, "must be greater than 0")
            if errs:
                raise ApiError(
                    422,
                    "Invalid",
                    f'PodLogOptions "{name}" is invalid: '
                    + ", ".join(f"{c['field']}: {c['message']}" for c in errs),
                    {"name": name, "kind": "PodLogOptions", "causes": list(errs)},
                )
            previous = query.get("previous", ["false"])[0] in ("1", "true", "True")
            spec = pod.get("spec") or {}
            names = [c.get("name", "") for c in spec.get("containers") or []]
            init_names = [c.get("name", "") for c in spec.get("initContainers") or []]
            container = query.get("container", [""])[0]
            if not container:
                if len(names) == 1:
                    container = names[0]
                elif not names:
                    raise ApiError(400, "BadRequest", f"a container name must be specified for pod {name}")
                else:
                    message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
                    if init_names:
                        message += f" or one of the init containers: [{' '.join(init_names)}]"
                    raise ApiError(400, "BadRequest", message)
            elif container not in names + init_names:
                raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
            if not spec.get("nodeName"):
                return 200, b""
            cstatus = next(
                (
                    cs
                    for cs in (pod.get("status") or {}).get("containerStatuses") or []
                    if cs.get("name") == container
                ),
                {},
            )
            state, last = cstatus.get("state") or {}, cstatus.get("lastState") or {}
            if previous:
                if not last.get("terminated"):
                    raise ApiError(
                        400,
                        "BadRequest",
                        f'previous terminated container "{container}" in pod "{name}" not found',
                    )
            elif not (state.get("running") or state.get("terminated") or last.get("terminated")):
                reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
                raise ApiError(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                )
            text = self._logs.get((ns, name, container, previous), "")
        lines = text.splitlines(keepends=True)
        if tail is not None:
            lines = lines[len(lines) - tail :] if tail else []
        data = "".join(lines).encode()
        if limit is not None:
            data = data[:limit]
        return 200, data

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
        """The create path of kube-apiserver, in its order: decode (400), mutating admission
        (NamespaceLifecycle: 404 / 403 Terminating), defaulting and the strategy's PrepareForCreate,
        validation (422 with every cause), validating admission (ResourceQuota: 403), storage (409
        AlreadyExists; ``object is being deleted: …`` while the old one is still terminating)."""
        obj = self._check_body(res, ns, server_normalise(copy.deepcopy(body)))
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            # names.SimpleNameGenerator: the prefix cut to 58 characters, then 5 random ones.
            meta["name"] = meta["generateName"][:58] + _random_suffix()
        name = meta.get("name") or ""
        if res.namespaced:
            self._namespace_lifecycle(res, ns, name)
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
        self._apply_defaults(res, obj)
        if res.plural == "jobs":
            self._default_job(obj)
        self._validate(res, obj, create=True)
        if res.plural == "resourcequotas":
            self._validate_quota(obj)
        if res.plural == "pods":
            self._admit_pod(obj)
        existing = self._store.get((res.plural, ns, name))
        if existing is not None:
            group, qual = qualified_resource(res)
            prefix = "object is being deleted: " if existing["metadata"].get("deletionTimestamp") else ""
            raise ApiError(
                409,
                "AlreadyExists",
                f'{prefix}{qual} "{name}" already exists',
                {"name": name, "group": group, "kind": res.plural},
            )
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
            # pkg/registry/core/namespace/storage.go Delete: the namespace gets deletionTimestamp and
            # status.phase Terminating and is answered (200, the object); the namespace controller
            # (_sync_namespaces) deletes its content and then the namespace.
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _now()
                obj["status"] = {"phase": "Terminating"}
                self._bump(obj)
            answer = copy.deepcopy(obj)
            self._sync_namespaces(force=not self.controllers)
            self._run_controllers()
            return 200, answer, headers
        if res.plural == "resourceclaims" and ((obj.get("status") or {}).get("reservedFor")):
            # Finalizer resource.kubernetes.io/delete-protection: a claim in use stays (deletionTimestamp)
            # until no pod holds it (pkg/controller/resourceclaim removes the finalizer).
            meta = obj["metadata"]
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = _now()
                meta.setdefault("finalizers", []).append("resource.kubernetes.io/delete-protection")
                self._bump(obj)
            return 200, copy.deepcopy(obj), headers
        if res.plural == "pods":
            # pkg/registry/core/pod/storage/storage.go ReturnDeletedObject: the answer is the Pod —
            # Terminating when graceful, as it was when it went at once.
            last = copy.deepcopy(obj)
            last["metadata"].setdefault("deletionTimestamp", _now())
            last["metadata"].setdefault("deletionGracePeriodSeconds", 0 if grace is None else grace)
            self._delete_pod_gracefully((res.plural, ns, name), grace)
            self._run_controllers()
            live = self._store.get((res.plural, ns, name))
            return 200, copy.deepcopy(live if live is not None else last), headers
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
        if "managedFields" not in meta and old["metadata"].get("managedFields"):
            # An update that leaves managedFields out keeps them (server-side apply's ownership).
            meta["managedFields"] = copy.deepcopy(old["metadata"]["managedFields"])
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
            raise self._invalid(res, name, "metadata", "Required value", "FieldValueRequired")
        if not status_only:
            self._apply_defaults(res, new)
            self._validate(res, new, create=False)
            self._validate_update(res, name, old, new)
            if res.plural == "resourcequotas":
                self._validate_quota(new)
        return self._store_update(res, ns, name, old, new)

    def _apply(self, res: Resource, ns: str, name: str, body, query: dict, status_only: bool) -> tuple:
        """Server-side apply (``PATCH`` with ``application/apply-patch+yaml``, ``fieldManager``,
        ``force``), as https://kubernetes.io/docs/reference/using-api/server-side-apply/ defines it:
        creates the object when absent (201); records the manager's fields in
        ``metadata.managedFields`` (operation ``Apply``, FieldsV1); a field another manager owns and
        the configuration sets to a different value is a 409 conflict (``Apply failed with N
        conflict(s): conflict with "m": .path``, causes of type ``FieldManagerConflict``) unless
        ``force=true``, which takes it over; a field the manager applied before and now leaves out
        is removed unless another manager owns it. Only Apply operations own fields here: writes
        by create / update / merge patch record no manager (the real server records Update
        managers too)."""
        manager = (query.get("fieldManager") or [""])[0]
        if not manager:
            raise ApiError(
                400,
                "BadRequest",
                "PATCH, application/apply-patch+yaml: fieldManager is required for apply requests",
            )
        force = (query.get("force") or ["false"])[0] == "true"
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", f"the body of the request must be a {res.kind} object")
        if "apiVersion" not in body or "kind" not in body:
            raise ApiError(400, "BadRequest", "apiVersion and kind must be set in an apply configuration")
        config = self._check_body(res, ns, server_normalise(_drop_nulls(copy.deepcopy(body))))
        if config["metadata"].get("name", name) != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({config['metadata'].get('name')}) does not match the name on the URL ({name})",
            )
        config["metadata"]["name"] = name
        if config["metadata"].pop("managedFields", None):
            raise ApiError(400, "BadRequest", "metadata.managedFields must be nil")
        if status_only:
            config = {
                "apiVersion": res.api_version,
                "kind": res.kind,
                "metadata": config["metadata"],
                "status": config.get("status") or {},
            }
        elif res.plural in _STATUS_SUBRESOURCE:
            config.pop("status", None)
        mine = field_paths(config)
        entry = {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": res.api_version,
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(mine),
        }
        if status_only:
            entry["subresource"] = "status"
        old = self._store.get((res.plural, ns, name))
        if old is None:
            if status_only:
                raise _not_found(res, name)
            self._create(res, ns, config, query)
            stored = self._store[(res.plural, ns, name)]
            stored["metadata"]["managedFields"] = [entry]
            return 201, copy.deepcopy(stored)
        managed = copy.deepcopy(old["metadata"].get("managedFields") or [])
        others = [
            m
            for m in managed
            if (m.get("manager"), m.get("subresource")) != (manager, entry.get("subresource"))
        ]
        previous = next((m for m in managed if m not in others), None)
        conflicts = []
        for other in others:
            owned = fields_v1_paths(other.get("fieldsV1") or {})
            for path in sorted(mine & owned):
                if path[-1] != "." and _at_path(config, path) != _at_path(old, path):
                    conflicts.append((other, path))
        if conflicts and not force:

            def who(m: dict) -> str:
                if m.get("operation") == "Update":
                    return f'"{m.get("manager")}" using {m.get("apiVersion")}'
                return f'"{m.get("manager")}"'

            if len(conflicts) == 1:
                message = f"Apply failed with 1 conflict: conflict with {who(conflicts[0][0])}: {field_path_text(conflicts[0][1])}"
            else:
                lines = []
                for m in sorted(
                    {c[0]["manager"]: c[0] for c in conflicts}.values(), key=lambda m: m["manager"]
                ):
                    lines.append(f"conflicts with {who(m)}:")
                    lines += [f"- {field_path_text(p)}" for o, p in conflicts if o["manager"] == m["manager"]]
                message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
            causes = [
                {
                    "type": "FieldManagerConflict",
                    "message": f"conflict with {who(o)}",
                    "field": field_path_text(p),
                }
                for o, p in conflicts
            ]
            raise ApiError(409, "Conflict", message, {"causes": causes})
        for other in others:  # force: the conflicting fields change owner (same values stay shared)
            taken = {p for o, p in conflicts if o is other}
            if taken:
                other["fieldsV1"] = fields_v1(fields_v1_paths(other.get("fieldsV1") or {}) - taken)
        others = [m for m in others if m.get("fieldsV1")]
        new = strategic_merge_patch(copy.deepcopy(old), config)
        still_owned = set().union(*(fields_v1_paths(m["fieldsV1"]) for m in others)) if others else set()
        if previous is not None:
            # Whole list items first (their key field identifies them), then fields, deepest first.
            dropped = fields_v1_paths(previous.get("fieldsV1") or {}) - mine - still_owned
            for path in sorted(dropped, key=lambda p: (p[-1] != ".", -len(p), p)):
                _remove_path(new, path)
        new = server_normalise(new)
        kept = [
            entry if mf is previous else mf
            for mf in managed
            if mf is previous or any(mf is o for o in others)
        ]
        new["metadata"]["managedFields"] = kept if previous is not None else [*kept, entry]
        if not status_only:
            self._apply_defaults(res, new)
            self._validate(res, new, create=False)
            self._validate_update(res, name, old, new)
        if previous is not None and previous.get("fieldsV1") == entry["fieldsV1"]:
            # The manager's fields are the same: its entry keeps its time, so an apply that changes
            # nothing is not written (same resourceVersion, no event) by _store_update.
            entry["time"] = previous.get("time", entry["time"])
        return 200, self._store_update(res, ns, name, old, new)

    def _conflict(self, res: Resource, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {qualified_resource(res)[1]} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            {"name": name, "group": qualified_resource(res)[0], "kind": res.plural},
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
            self._apply_defaults(res, new)
            self._validate(res, new, create=False)
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
