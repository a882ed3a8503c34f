"""Connecting a cluster: save its connection (kubeconfig path, uploaded kubeconfig, context or
in-cluster), **Test connection**, and the default cluster of the first start.

The test asks the API server, through the official client and with no database transaction open:

* its version (``GET /version``);
* which of Suanchi's verbs RBAC allows, one ``SelfSubjectAccessReview`` per verb
  (kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access);
* which device plugins, DRA drivers and exporters run: DaemonSets by well-known names (the vendors'
  deployment manifests) and ``resource.k8s.io/v1`` DeviceClasses
  (kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/#deviceclass).

The answer is in plain words (``lines``) and stored on the Cluster (``last_check``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _

from apps.clusters.kubeconfig_safety import kubeconfig_parse
from apps.clusters.tls import tls_failure, tls_lines
from apps.core.audit import change_record_create
from apps.core.conf import suanchi_setting
from apps.core.errors import ValidationFailed
from apps.core.validation import validate
from apps.inventory.models import Cluster

# (verb, API group, resource): what the pusher, reconcile and cluster sync do.
VERBS: tuple[tuple[str, str, str], ...] = (
    ("list", "", "nodes"),
    ("patch", "", "nodes"),
    ("list", "", "pods"),
    ("list", "", "events"),
    ("create", "", "namespaces"),
    ("create", "", "resourcequotas"),
    ("create", "batch", "jobs"),
    ("delete", "batch", "jobs"),
    ("create", "apps", "deployments"),
    ("delete", "apps", "deployments"),
    ("list", "resource.k8s.io", "resourceslices"),
    ("create", "resource.k8s.io", "resourceclaims"),
)
# DaemonSet name fragment -> what it is (names from the vendors' manifests / Helm charts:
# NVIDIA k8s-device-plugin and GPU Operator (nvidia-device-plugin-daemonset, nvidia-dcgm-exporter),
# NVIDIA dra-driver-gpu, Ascend MindCluster (ascend-device-plugin, npu-exporter), ROCm
# k8s-device-plugin (amdgpu-device-plugin), AMD device-metrics-exporter, Hygon dcu-device-plugin /
# dcu-exporter, Cambricon cambricon-device-plugin / mlu-exporter, HAMi hami-device-plugin, Iluvatar
# iluvatar-device-plugin (Deep-Spark/ix-device-plugin ix-device-plugin.yaml) / ix-exporter
# (Deep-Spark/ix-exporter deployment/static/ix-exporter.yaml), MetaX mx-exporter (MetaX-MACA/mxExporter
# @ 874612bf deployment/mx-exporter: DaemonSet "metax-mx-exporter", Helm "<release>-mx-exporter"),
# Enflame gcu-exporter (EnflameTechnology/gcu-exporter @ 0e6e15c9 deployments/yaml/gcu-exporter.yaml:
# DaemonSet "gcu-exporter-daemonset")).
KNOWN_DAEMONSETS: tuple[tuple[str, str], ...] = (
    ("nvidia-dra-driver", "NVIDIA DRA driver"),
    ("dra-driver-nvidia", "NVIDIA DRA driver"),  # the chart's name since the repository's rename
    ("nvidia-device-plugin", "NVIDIA device plugin"),
    ("dcgm-exporter", "NVIDIA DCGM exporter"),
    ("hami-device-plugin", "HAMi device plugin"),
    ("ascend-device-plugin", "Ascend device plugin"),
    # HAMi's ascend-dra-driver chart: DaemonSet "<release>-ascend-dra-driver-kubeletplugin" (its
    # templates/kubeletplugin.yaml; "ascend-dra-driver-kubeletplugin" for the README's release name).
    ("ascend-dra-driver", "HAMi Ascend DRA driver"),
    ("npu-exporter", "Ascend NPU exporter"),
    ("amdgpu-device-plugin", "AMD GPU device plugin"),
    ("amd-gpu-device-plugin", "AMD GPU device plugin"),
    ("device-metrics-exporter", "AMD device metrics exporter"),
    ("dcu-device-plugin", "Hygon DCU device plugin"),
    ("dcu-exporter", "Hygon DCU exporter"),
    # HYGON-AI/k8s-hcu-device-plugin deployment/static/*.yaml: hcu-device-plugin (-mig, -hami);
    # HYGON-AI/k8s-hcu-dra-driver deployments/static/hcu-dra-driver.yaml; HYGON-AI/hcu-exporter.
    ("hcu-device-plugin", "Hygon HCU device plugin"),
    ("hcu-dra-driver", "Hygon HCU DRA driver"),
    ("hcu-exporter", "Hygon HCU exporter"),
    ("cambricon-device-plugin", "Cambricon device plugin"),
    ("mlu-exporter", "Cambricon MLU exporter"),
    ("iluvatar-device-plugin", "Iluvatar device plugin"),
    ("ix-exporter", "Iluvatar ix-exporter"),
    ("mx-exporter", "MetaX mx-exporter"),
    ("gcu-exporter", "Enflame gcu-exporter"),
)


# The NVIDIA DRA driver's sharing feature gates, read from its kubelet plugin (sigs.k8s.io/
# dra-driver-nvidia-gpu, formerly NVIDIA/k8s-dra-driver-gpu, @ 22407113785e78c7763b4637689a201eb39c6199):
# the chart's DaemonSet ``<chart name>-kubelet-plugin`` (templates/kubeletplugin.yaml; chart
# ``dra-driver-nvidia-gpu``, before the rename ``nvidia-dra-driver-gpu``) passes the Helm value
# ``featureGates`` to its ``gpus`` container as env ``FEATURE_GATES`` = "K=V," per gate, read as the
# ``--feature-gates`` flag (pkg/flags/featuregates.go; k8s.io/component-base featuregate: comma-
# separated key=value, strconv.ParseBool values). Defaults (pkg/featuregates/featuregates.go):
# TimeSlicingSettings and MPSSupport alpha, off; DynamicMIG alpha, off (and refused together with
# MPSSupport). api/nvidia.com/resource/v1beta1/validate.go refuses a GpuConfig whose sharing
# strategy's gate is off when the claim is prepared.
NVIDIA_DRA_GATES: dict[str, bool] = {"TimeSlicingSettings": False, "MPSSupport": False, "DynamicMIG": False}
_GO_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def feature_gates_parse(text: str) -> dict[str, bool] | None:
    """``"TimeSlicingSettings=true,MPSSupport=false,"`` → {name: on}; None when a pair is not
    ``key=bool`` (the driver would refuse to start with it: nothing is known then)."""
    gates: dict[str, bool] = {}
    for pair in str(text).split(","):
        pair = pair.strip()
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or value.strip() not in _GO_BOOLS:
            return None
        gates[key.strip()] = _GO_BOOLS[value.strip()]
    return gates


def driver_gates(ds: dict, container_name: str, defaults: dict[str, bool]) -> dict[str, bool] | None:
    """The feature gates a DRA driver's kubelet-plugin DaemonSet ``ds`` runs with, of those in
    ``defaults`` (the driver's defaults for the gates it does not set), read from the env
    ``FEATURE_GATES`` and the ``--feature-gates=`` flag of its container ``container_name`` (else the
    first container that sets either); None when they cannot be read (an env from a ConfigMap or
    Secret, a malformed list)."""
    containers = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    ordered = [c for c in containers if c.get("name") == container_name] or list(containers)
    for container in ordered:
        texts = []
        for env in container.get("env") or []:
            if env.get("name") == "FEATURE_GATES":
                if "value" not in env:
                    return None  # valueFrom: not in the DaemonSet
                texts.append(str(env.get("value") or ""))
        for arg in (container.get("args") or []) + (container.get("command") or []):
            if str(arg).startswith("--feature-gates="):
                texts.append(str(arg).split("=", 1)[1])
        if texts or container.get("name") == container_name:
            gates = dict(defaults)
            for text in texts:
                parsed = feature_gates_parse(text)
                if parsed is None:
                    return None
                gates.update({k: v for k, v in parsed.items() if k in defaults})
            return gates
    return None


def nvidia_dra_gates(ds: dict) -> dict[str, bool] | None:
    """The sharing gates the NVIDIA DRA driver's kubelet plugin (container ``gpus``) runs with."""
    return driver_gates(ds, "gpus", NVIDIA_DRA_GATES)


# HAMi's Ascend DRA driver (Project-HAMi/ascend-dra-driver @ dc1db52ee22085e63406da674fade2684bd13748):
# its one gate HAMivNPUCore defaults to off in code (pkg/featuregates/featuregates.go, alpha), and the
# chart's ``plugin`` container passes ``--feature-gates=HAMivNPUCore=<not
# kubeletPlugin.fullCardAndTraditionalVNPU.enabled>`` (templates/kubeletplugin.yaml); the flag is also
# read from env FEATURE_GATES (pkg/flags/utils.go pflagToCLI). Off, the driver publishes type "NPU"
# devices, which the HAMivNPUCore class does not select (apps.clusters.ascend).
ASCEND_DRA_GATES: dict[str, bool] = {"HAMivNPUCore": False}


def ascend_dra_gates(ds: dict) -> dict[str, bool] | None:
    """The gates HAMi's Ascend DRA kubelet plugin (container ``plugin``) runs with."""
    return driver_gates(ds, "plugin", ASCEND_DRA_GATES)


def hcu_plugin_strategy(ds: dict) -> str | None:
    """The registration strategy Hygon's HCU device plugin DaemonSet ``ds`` runs with: its
    ``RESOURCE_REGISTER_STRATEGY`` env (or ``--strategy``), default ``mixed`` (HYGON-AI/
    k8s-hcu-device-plugin @ 42b18bd893d308704e8c9b0e0c95e981b79886dd cmd/main.go). ``hcu`` and
    ``mixed`` advertise whole cards as ``hygon.com/hcu`` (Suanchi's mode ``hcu``); ``vhcu`` / ``mig``
    / ``hami`` only slices. None when the value comes from elsewhere (valueFrom)."""
    containers = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    for container in containers:
        for arg in [*(container.get("command") or []), *(container.get("args") or [])]:
            if str(arg).startswith("--strategy="):
                return str(arg).split("=", 1)[1]
        for env in container.get("env") or []:
            if env.get("name") == "RESOURCE_REGISTER_STRATEGY":
                return str(env["value"]) if "value" in env else None
    return "mixed"


def _verb_text(verb: str, group: str, resource: str) -> str:
    return f"{verb} {resource}" + (f" ({group})" if group else "")


def cluster_probe(cluster: Cluster) -> dict[str, Any]:
    """Ask the cluster (network only, no database). Never raises for an answer the cluster gives:
    each failure becomes a problem line."""
    from kubernetes import client

    from apps.clusters.backends.errors import BackendError
    from apps.clusters.backends.kubernetes import KubernetesBackend

    result: dict[str, Any] = {
        "ok": False,
        "server_version": "",
        "verbs": {},
        "plugins": [],
        "device_classes": [],
        "problems": [],
    }
    if cluster.backend != Cluster.Backend.KUBERNETES:
        result.update(ok=True, server_version="simulated")
        return result
    try:
        backend = KubernetesBackend(cluster, timeout=10)
    except BackendError as e:
        result["problems"].append(e.message)
        return result
    try:
        api = backend.api_client
        try:
            version = backend._call("get /version", client.VersionApi(api).get_code)
        except BackendError as e:
            tls = tls_failure(e, server=str(getattr(api.configuration, "host", "") or ""))
            if tls:  # explained at display (check_lines); the raw text kept for staff
                result["tls"] = tls
            else:
                result["problems"].append(
                    _("The API server did not answer: %(error)s") % {"error": e.message}
                )
            return result
        result["server_version"] = (
            version.get("gitVersion") or f"{version.get('major')}.{version.get('minor')}"
        )
        auth = client.AuthorizationV1Api(api)
        for verb, group, resource in VERBS:
            body = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}},
            }
            try:
                review = backend._call("access review", auth.create_self_subject_access_review, body)
                result["verbs"][_verb_text(verb, group, resource)] = bool(
                    (review.get("status") or {}).get("allowed")
                )
            except BackendError as e:
                result["verbs"][_verb_text(verb, group, resource)] = False
                result["problems"].append(e.message)
        try:
            daemonsets = (
                backend._call(
                    "list daemonsets", client.AppsV1Api(api).list_daemon_set_for_all_namespaces
                ).get("items")
                or []
            )
        except BackendError as e:
            daemonsets = []
            result["problems"].append(e.message)
        for ds in daemonsets:
            meta = ds.get("metadata") or {}
            name = meta.get("name", "")
            what = next((label for fragment, label in KNOWN_DAEMONSETS if fragment in name), None)
            if what:
                status = ds.get("status") or {}
                plugin = {
                    "what": what,
                    "daemonset": f"{meta.get('namespace', '')}/{name}",
                    "ready": int(status.get("numberReady") or 0),
                    "desired": int(status.get("desiredNumberScheduled") or 0),
                }
                if what == "NVIDIA DRA driver" and name.endswith("-kubelet-plugin"):
                    plugin["feature_gates"] = nvidia_dra_gates(ds)
                    result.setdefault("dra_gates", {})["nvidia"] = {
                        "daemonset": plugin["daemonset"],
                        "gates": plugin["feature_gates"],
                    }
                if what == "Hygon HCU device plugin":
                    plugin["strategy"] = hcu_plugin_strategy(ds)
                if what == "HAMi Ascend DRA driver" and name.endswith("-kubeletplugin"):
                    plugin["feature_gates"] = ascend_dra_gates(ds)
                    result.setdefault("dra_gates", {})["huawei"] = {
                        "daemonset": plugin["daemonset"],
                        "gates": plugin["feature_gates"],
                    }
                result["plugins"].append(plugin)
        try:
            classes = backend._call("list deviceclasses", client.ResourceV1Api(api).list_device_class)
            result["device_classes"] = sorted(
                (c.get("metadata") or {}).get("name", "") for c in classes.get("items") or []
            )
        except BackendError as e:
            if e.status != 404:
                result["problems"].append(e.message)
            result["device_classes"] = None  # no resource.k8s.io/v1: no DRA
    finally:
        backend.close()
    result["ok"] = not result["problems"] and all(result["verbs"].values())
    return result


def check_lines(result: dict[str, Any]) -> list[str]:
    """The probe's answer in plain words."""
    lines: list[str] = []
    if result.get("server_version") == "simulated":
        return [_("Simulated cluster: nothing to connect to.")]
    if result.get("tls"):
        lines += tls_lines(result["tls"])
    if result.get("server_version"):
        lines.append(_("Connected: Kubernetes %(version)s.") % {"version": result["server_version"]})
    verbs = result.get("verbs") or {}
    denied = [v for v, ok in verbs.items() if not ok]
    if verbs and not denied:
        lines.append(_("RBAC allows every verb Suanchi uses."))
    elif denied:
        lines.append(_("RBAC denies: %(verbs)s.") % {"verbs": ", ".join(denied)})
    for p in result.get("plugins") or []:
        lines.append(
            _("%(what)s runs as DaemonSet %(ds)s (%(ready)d of %(desired)d ready).")
            % {"what": p["what"], "ds": p["daemonset"], "ready": p["ready"], "desired": p["desired"]}
        )
        if "feature_gates" in p:
            gates = p["feature_gates"]
            if gates is None:
                lines.append(
                    _("Its feature gates could not be read (FEATURE_GATES is not a literal key=value list).")
                )
            else:
                shown = ", ".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))
                lines.append(_("Its feature gates: %(gates)s.") % {"gates": shown})
    if result.get("server_version") and not result.get("plugins"):
        lines.append(_("No known device plugin or exporter DaemonSet was found."))
    classes = result.get("device_classes")
    if classes is None:
        lines.append(_("The API server does not serve resource.k8s.io/v1: no Dynamic Resource Allocation."))
    elif classes:
        lines.append(_("DRA DeviceClasses: %(names)s.") % {"names": ", ".join(classes)})
    elif result.get("server_version"):
        lines.append(_("DRA is served but no DeviceClass exists."))
    lines += [str(p) for p in result.get("problems") or []]
    return lines


def cluster_connection_test(*, cluster: Cluster, actor: Any) -> dict[str, Any]:
    """Probe the cluster (outside any transaction), then store the answer on the row."""
    result = cluster_probe(cluster)
    result["lines"] = check_lines(result)
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(
            last_checked_at=timezone.now(), last_check=result, updated_at=timezone.now()
        )
        change_record_create(
            actor=actor, action="cluster.test_connection", obj=cluster, after={"ok": result["ok"]}
        )
    cluster.last_check = result
    return result


# --------------------------------------------------------------------------------------------------
# saving a connection


def kubeconfig_check(data: bytes, context: str = "") -> dict:
    """An uploaded kubeconfig, checked: a ``kind: Config`` with clusters, users and contexts (and
    ``context`` among them when given) that runs no program and reads no file
    (``apps.clusters.kubeconfig_safety``). ``ValidationFailed`` naming the problem."""
    doc = kubeconfig_parse(data)
    for key in ("clusters", "contexts"):
        if not isinstance(doc.get(key), list) or not doc[key]:
            raise ValidationFailed(_("The kubeconfig has no %(key)s.") % {"key": key})
    names = [c.get("name") for c in doc["contexts"] if isinstance(c, dict)]
    if context and context not in names:
        raise ValidationFailed(
            _("The kubeconfig has no context %(context)s (it has: %(names)s).")
            % {"context": context, "names": ", ".join(map(str, names))}
        )
    return doc


def kubeconfig_secret_path(slug: str) -> Path:
    return Path(suanchi_setting("SECRETS_DIR")) / f"kubeconfig-{slugify(slug) or 'cluster'}.yaml"


def kubeconfig_store(*, slug: str, data: bytes) -> str:
    """Write an uploaded kubeconfig as a secret file (mode 0600, in ``SUANCHI_SECRETS_DIR``);
    returns its path, which the Cluster row references."""
    path = kubeconfig_secret_path(slug)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # nothing half-written stays behind
        raise
    return str(path)


def cluster_save(
    *, cluster: Cluster | None = None, fields: dict[str, Any], kubeconfig: bytes | None = None, actor: Any
) -> Cluster:
    """Create or edit a Cluster's connection. An uploaded ``kubeconfig`` is checked, stored as a
    secret file and referenced by path. Model validation errors → ``ValidationFailed``."""
    creating = cluster is None
    cluster = cluster or Cluster()
    before = {} if creating else {f: getattr(cluster, f) for f in fields}
    for name, value in fields.items():
        setattr(cluster, name, value)
    if kubeconfig:
        kubeconfig_check(kubeconfig, cluster.kube_context)
        cluster.kubeconfig_path = str(kubeconfig_secret_path(cluster.slug or ""))
        cluster.kubeconfig_upload_pending = True  # written below, once the row is valid
        cluster.in_cluster = False
    validate(cluster, what=f"cluster {cluster.name or cluster.slug}".strip())
    with transaction.atomic():
        cluster.save()
        change_record_create(
            actor=actor,
            action="cluster.create" if creating else "cluster.update",
            obj=cluster,
            before=before,
            after={f: getattr(cluster, f) for f in fields},
        )
        if kubeconfig:  # last: a failed save leaves no file behind, a failed write no row
            try:
                cluster.kubeconfig_path = kubeconfig_store(slug=cluster.slug, data=kubeconfig)
            except OSError as e:
                raise ValidationFailed(
                    _("The kubeconfig could not be stored in %(dir)s (SUANCHI_SECRETS_DIR): %(error)s")
                    % {"dir": suanchi_setting("SECRETS_DIR"), "error": e.strerror or e}
                ) from e
    return cluster


def default_cluster_ensure(*, actor: Any = "first-start") -> Cluster | None:
    """First start: with no cluster at all, ``SUANCHI_CLUSTER_BACKEND`` (+ ``KUBECONFIG``, else the
    in-cluster service account) creates the default cluster. Returns it, or None when nothing was done."""
    backend = (suanchi_setting("CLUSTER_BACKEND", None) or "").strip()
    if not backend or Cluster.objects.exists():
        return None
    if backend not in Cluster.Backend.values:
        raise ValidationFailed(
            _("SUANCHI_CLUSTER_BACKEND=%(value)s: use simulated or kubernetes") % {"value": backend}
        )
    kubeconfig = (suanchi_setting("KUBECONFIG", None) or "").strip()
    fields: dict[str, Any] = {"name": "default", "slug": "default", "backend": backend}
    if backend == Cluster.Backend.KUBERNETES:
        fields.update(kubeconfig_path=kubeconfig, in_cluster=not kubeconfig)
    return cluster_save(fields=fields, actor=actor)
