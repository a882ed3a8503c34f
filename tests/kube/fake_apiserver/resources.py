"""Resources the fake serves, their discovery documents, and the API error type."""

from __future__ import annotations

import datetime as dt
import re
import secrets
from dataclasses import dataclass


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
