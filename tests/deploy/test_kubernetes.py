"""platform/kubernetes: every manifest and every rendered overlay passes kubernetes-validate --strict
(1.30 and 1.34), and the node agent DaemonSets fit the nodes Suanchi labels and taints."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest
import yaml
from kubernetes_validate.utils import resources_from_file

from apps.inventory.services.ledger import _STATUS_TAINTS
from apps.inventory.vendors import ADAPTERS
from apps.rollout.services import GRAY_TAINT
from tests.deploy.kustomize import KustomizeError, build, strategic_merge
from tests.kube.validation import assert_strict_valid

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "platform" / "kubernetes"
KUSTOMIZATIONS = {
    "root": KUBE,
    "dev": KUBE / "overlays" / "dev",
    "production": KUBE / "overlays" / "production",
}


def _validate(obj: dict) -> None:
    assert_strict_valid(obj)


def _by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _load_agent():
    path = ROOT / "platform" / "agent" / "suanchi-agent"
    loader = importlib.machinery.SourceFileLoader("suanchi_agent_under_test", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' toleration matching (an empty key with Exists matches every taint)."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = toleration.get("operator", "Equal")
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    return operator == "Exists" or toleration.get("value", "") == taint.get("value", "")


def test_every_yaml_document_under_platform_kubernetes_validates_strictly():
    files = [p for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml"]
    assert len(files) >= 18
    for path in files:
        documents = resources_from_file(str(path))
        assert documents, path
        for obj in documents:
            _validate(obj)
    assert not list(KUBE.rglob("*.py")) and not list(KUBE.rglob("__init__*"))


def test_every_manifest_file_is_listed_by_its_kustomization():
    for kustomization in KUBE.rglob("kustomization.yaml"):
        listed = {
            (kustomization.parent / entry).resolve()
            for entry in yaml.safe_load(kustomization.read_text()).get("resources", [])
        }
        for path in kustomization.parent.glob("*.yaml"):
            assert path.name == "kustomization.yaml" or path.resolve() in listed, path


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_each_kustomization_renders_objects_that_validate_strictly(name):
    objects = build(KUSTOMIZATIONS[name])
    for obj in objects:
        _validate(obj)
        if obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"]["namespace"] == "suanchi", obj["metadata"]["name"]
    deployments = _by_kind(objects, "Deployment")
    assert set(deployments) == {"suanchi-web", "suanchi-worker", "suanchi-beat"}
    assert set(_by_kind(objects, "DaemonSet")) == {
        f"suanchi-agent-{vendor}" for vendor, adapter in ADAPTERS.items() if adapter.parsers
    }
    # The Service and the probes point at ports the web container declares.
    web = deployments["suanchi-web"]["spec"]["template"]
    ports = {p["name"] for c in web["spec"]["containers"] for p in c.get("ports", [])}
    assert _by_kind(objects, "Service")["suanchi-web"]["spec"]["ports"][0]["targetPort"] in ports
    # Every Deployment / DaemonSet selector selects its own pod template.
    for obj in [*deployments.values(), *_by_kind(objects, "DaemonSet").values()]:
        selector = obj["spec"]["selector"]["matchLabels"]
        assert selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()


def test_the_overlays_set_replicas_resources_images_budgets_and_policies():
    dev = _by_kind(build(KUSTOMIZATIONS["dev"]), "Deployment")
    assert dev["suanchi-web"]["spec"]["replicas"] == dev["suanchi-worker"]["spec"]["replicas"] == 1
    dev_web = dev["suanchi-web"]["spec"]["template"]["spec"]["containers"][0]
    assert dev_web["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert dev_web["readinessProbe"]["httpGet"]["path"] == "/healthz"  # the patch merged, not replaced
    assert dev_web["image"] == "suanchi:dev"

    production = build(KUSTOMIZATIONS["production"])
    deployments = _by_kind(production, "Deployment")
    web, worker = deployments["suanchi-web"], deployments["suanchi-worker"]
    assert web["spec"]["replicas"] == worker["spec"]["replicas"] == 3
    assert deployments["suanchi-beat"]["spec"]["replicas"] == 1
    assert deployments["suanchi-beat"]["spec"]["strategy"]["type"] == "Recreate"
    images = {
        c["image"]
        for o in [*deployments.values(), *_by_kind(production, "DaemonSet").values()]
        for c in o["spec"]["template"]["spec"]["containers"]
        + o["spec"]["template"]["spec"].get("initContainers", [])
    }
    assert images == {"registry.example.com/suanchi/suanchi:0.1.0"}

    budgets = _by_kind(production, "PodDisruptionBudget")
    for name, deployment in (("suanchi-web", web), ("suanchi-worker", worker)):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert budgets[name]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budgets["suanchi-web"]["spec"]["minAvailable"] < web["spec"]["replicas"]  # a drain can proceed
    assert budgets["suanchi-worker"]["spec"]["maxUnavailable"] == 1

    policies = _by_kind(production, "NetworkPolicy")
    deny = policies["suanchi-default-deny-ingress"]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    allow = policies["suanchi-web-ingress"]["spec"]
    assert (
        allow["podSelector"]["matchLabels"].items() <= web["spec"]["template"]["metadata"]["labels"].items()
    )
    container_ports = {p["containerPort"] for p in web["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert [p["port"] for rule in allow["ingress"] for p in rule["ports"]] == sorted(container_ports)


def test_the_web_probes_send_an_allowed_host_and_the_proxy_scheme():
    objects = build(KUSTOMIZATIONS["production"])
    allowed = _by_kind(objects, "ConfigMap")["suanchi-config"]["data"]["DJANGO_ALLOWED_HOSTS"].split(",")
    container = _by_kind(objects, "Deployment")["suanchi-web"]["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        headers = {h["name"]: h["value"] for h in container[probe]["httpGet"]["httpHeaders"]}
        assert headers["Host"] in allowed
        assert headers["X-Forwarded-Proto"] == "https"


def test_the_control_plane_runs_as_non_root_on_a_read_only_root_filesystem():
    for name, deployment in _by_kind(build(KUSTOMIZATIONS["production"]), "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's USER
        tmp = {m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        assert "/tmp" in tmp, name  # gunicorn heartbeats, beat's schedule file
        for container in pod["containers"] + pod.get("initContainers", []):
            security = container["securityContext"]
            assert (
                security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
            )
            assert security["capabilities"]["drop"] == ["ALL"]


# ---------------------------------------------------------------------------------------------------
# The node agent DaemonSets
# ---------------------------------------------------------------------------------------------------


def _agent_daemonsets() -> dict[str, dict]:
    return {
        ds["metadata"]["labels"]["suanchi.io/vendor"]: ds
        for ds in _by_kind(build(KUSTOMIZATIONS["root"]), "DaemonSet").values()
    }


def test_each_agent_gets_its_node_name_from_the_downward_api_and_its_token_from_a_secret():
    objects = build(KUSTOMIZATIONS["root"])
    secret = _by_kind(objects, "Secret")["suanchi-agent-token"]
    config = _by_kind(objects, "ConfigMap")["suanchi-agent-config"]["data"]
    assert config["SUANCHI_URL"].startswith("https://")  # a POST does not follow the HTTP→HTTPS redirect
    daemonsets = _agent_daemonsets()
    assert daemonsets
    for vendor, ds in daemonsets.items():
        pod = ds["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, vendor
        assert "SUANCHI_AGENT_TOKEN" not in env  # the token is a file, never an environment value
        volumes = {v["name"]: v for v in pod["volumes"]}
        token_file = Path(env["SUANCHI_AGENT_TOKEN_FILE"]["value"])
        (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == token_file.parent]
        source = volumes[mount["name"]]["secret"]
        assert source["secretName"] == secret["metadata"]["name"]
        assert [i["path"] for i in source["items"] if i["key"] in secret["stringData"]] == [token_file.name]
        assert container["command"][:2] == ["python", "/usr/local/bin/suanchi-agent"]
        assert pod["automountServiceAccountToken"] is False
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")


def test_host_tools_are_mounted_read_only_with_a_checked_hostpath_type():
    for vendor, ds in _agent_daemonsets().items():
        pod = ds["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        host_paths = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
        assert host_paths, vendor
        for name, host_path in host_paths.items():
            # No unchecked ("") or creating (DirectoryOrCreate / FileOrCreate) types: a node without the
            # tool fails the pod's start instead of mounting an empty directory.
            assert host_path.get("type") in {"File", "Directory"}, (vendor, name)
        for mount in container["volumeMounts"]:
            assert mount.get("readOnly") is True, (vendor, mount["name"])


def test_each_agent_finds_the_tool_the_agent_runs_for_its_vendor_on_path():
    agent = _load_agent()
    daemonsets = _agent_daemonsets()
    for vendor, adapter in ADAPTERS.items():
        tools = {cmd[0] for kind, cmd in agent.TOOLS if kind in adapter.parsers}
        if not tools:
            assert vendor not in daemonsets
            continue
        (container,) = daemonsets[vendor]["spec"]["template"]["spec"]["containers"]
        path_dirs = [
            Path(d) for d in {e["name"]: e.get("value") for e in container["env"]}["PATH"].split(":")
        ]
        volumes = {v["name"]: v for v in daemonsets[vendor]["spec"]["template"]["spec"]["volumes"]}
        mounts = [
            (Path(m["mountPath"]), volumes[m["name"]].get("hostPath", {})) for m in container["volumeMounts"]
        ]
        for tool in tools:
            found = [
                (d, mount)
                for d in path_dirs
                for mount, host in mounts
                if (host.get("type") == "File" and mount == d / tool)
                or (host.get("type") == "Directory" and d.is_relative_to(mount))
            ]
            assert found, (vendor, tool, path_dirs)


def test_each_agent_tolerates_every_taint_suanchi_puts_on_its_vendors_nodes():
    daemonsets = _agent_daemonsets()
    for vendor, ds in daemonsets.items():
        adapter = ADAPTERS[vendor]
        pod = ds["spec"]["template"]["spec"]
        # It runs exactly where Suanchi's labels put the vendor's cards (seed 004 §2).
        assert pod["nodeSelector"]["accelerator"] == adapter.node_labels()["accelerator"]
        taints = [
            *adapter.taints(),
            *[dict(t) for t in _STATUS_TAINTS.values()],
            dict(GRAY_TAINT),
            # A device plugin's or cloud's taint named after the resource (nvidia.com/gpu=present:NoSchedule).
            {"key": adapter.resource_name, "value": "present", "effect": "NoSchedule"},
        ]
        for taint in taints:
            assert any(tolerates(t, taint) for t in pod["tolerations"]), (vendor, taint)
        # ... and nothing broader: another vendor's accelerator taint is not tolerated.
        for other_vendor, other in ADAPTERS.items():
            if other_vendor != vendor:
                for taint in other.taints():
                    assert not any(tolerates(t, taint) for t in pod["tolerations"]), (vendor, taint)


def test_the_toleration_matcher_follows_kubernetes_semantics():
    taint = {"key": "accelerator", "value": "huawei-npu", "effect": "NoSchedule"}
    assert tolerates({"key": "accelerator", "operator": "Equal", "value": "huawei-npu"}, taint)
    assert not tolerates({"key": "accelerator", "operator": "Equal", "value": "nvidia-gpu"}, taint)
    assert not tolerates({"key": "accelerator", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert tolerates({"operator": "Exists"}, taint)


# ---------------------------------------------------------------------------------------------------
# The renderer itself (so a green build means what kustomize would do)
# ---------------------------------------------------------------------------------------------------


def test_the_renderer_merges_containers_by_name_and_refuses_what_kustomize_refuses(tmp_path):
    base = {"spec": {"containers": [{"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]}]}}
    patch = {"spec": {"containers": [{"name": "a", "env": [{"name": "B", "value": "2"}]}, {"name": "b"}]}}
    merged = strategic_merge(base, patch)
    assert merged["spec"]["containers"][0] == {
        "name": "a",
        "image": "x",
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    }
    assert [c["name"] for c in merged["spec"]["containers"]] == ["a", "b"]

    (tmp_path / "kustomization.yaml").write_text("resources: [overlay]\n")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [..]\n")
    with pytest.raises(KustomizeError, match="cycle"):
        build(overlay)
    (overlay / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(KustomizeError, match="unsupported"):
        build(overlay)
