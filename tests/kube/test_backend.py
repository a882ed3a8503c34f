"""Cluster backends: the real ``kubernetes`` client against the fake API server, and the simulated one."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apps.clusters.backends.errors import ImmutableFieldError, PermanentBackendError, TransientBackendError
from apps.clusters.backends.kubernetes import KubernetesBackend
from apps.clusters.backends.simulated_durable import DurableSimulatedBackend
from apps.clusters.backends.simulated_memory import SimulatedBackend
from apps.clusters.connections import backend_for
from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for

MANAGED = {"app.kubernetes.io/managed-by": "suanchi"}


def namespace(name="proj-a"):
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**MANAGED, "suanchi.io/project": name}},
    }


def job(name="train-1", ns="proj-a", image="pytorch:2.4", labels=None, duration=None):
    annotations = {"suanchi.io/expected-duration-seconds": str(duration)} if duration else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {**MANAGED, "suanchi.io/job": name, **(labels or {})},
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {**MANAGED, "suanchi.io/job": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": "gpu-node-1",
                    "containers": [
                        {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            },
        },
    }


def node(name="gpu-node-1"):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


@pytest.fixture
def kube(server, tmp_path):
    backend = KubernetesBackend(str(kubeconfig_for(server, tmp_path)), timeout=0.5)
    yield backend
    backend.close()


@pytest.fixture
def sim():
    return SimulatedBackend(seed=7)


@pytest.fixture(params=["kubernetes", "simulated"])
def backend(request):
    if request.param == "kubernetes":
        return request.getfixturevalue("kube")
    return request.getfixturevalue("sim")


# -- the fake server itself, through the official client ----------------------------------------------


def test_kubeconfig_loads_with_the_official_client(server, tmp_path):
    path = kubeconfig_for(server, tmp_path)
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == server.url
    with k8s_config.new_client_from_config(config_file=str(path)) as api_client:
        core = k8s.CoreV1Api(api_client)
        created = core.create_namespace(body=namespace("typed"))
        assert created.metadata.uid and created.metadata.labels["kubernetes.io/metadata.name"] == "typed"
        assert [
            n.metadata.name for n in core.list_namespace(label_selector="suanchi.io/project=typed").items
        ] == ["typed"]
        with pytest.raises(k8s.exceptions.ApiException) as exc:
            core.read_namespace("missing")
        assert exc.value.status == 404


def test_fake_server_rejects_an_unknown_namespace_and_serves_watch(server, kube):
    with pytest.raises(PermanentBackendError) as exc:
        kube.apply(job(ns="nope"))
    assert exc.value.status == 404 and 'namespaces "nope" not found' in exc.value.message
    kube.apply(namespace())
    core = kube._apis["CoreV1Api"]
    # watch semantics: tests/kube/test_watch.py
    answer = core.list_namespaced_pod("proj-a", watch=True, timeout_seconds=1, _preload_content=False)
    assert answer.status == 200 and answer.data == b""  # no pod: nothing until timeoutSeconds


def test_fake_server_pod_phase_drives_job_status(server, kube):
    kube.apply(namespace())
    kube.apply(job())
    (pod,) = kube.list_owned("Pod", "proj-a", "job-name=train-1")
    assert pod["status"]["phase"] == "Pending" and pod["spec"]["nodeName"] == "gpu-node-1"
    server.set_pod_phase("proj-a", pod["metadata"]["name"], "Failed", exit_code=137, reason="OOMKilled")
    live = kube.get("Pod", "proj-a", pod["metadata"]["name"])
    assert live["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert int(live["metadata"]["resourceVersion"]) > int(pod["metadata"]["resourceVersion"])
    status = kube.get("Job", "proj-a", "train-1")["status"]
    assert status["failed"] == 1 and status["conditions"][0]["reason"] == "BackoffLimitExceeded"


# -- scenarios shared by both backends ----------------------------------------------------------------


def test_create_namespace_and_job(backend):
    ns = backend.apply(namespace())
    assert ns.action == "created" and ns.uid
    result = backend.apply(job())
    assert result.action == "created"
    assert result.uid and int(result.resource_version) > int(ns.resource_version)
    live = backend.get("Job", "proj-a", "train-1")
    assert live["metadata"]["uid"] == result.uid
    assert live["metadata"]["generation"] == 1 and live["metadata"]["creationTimestamp"]
    assert backend.get("Job", "proj-a", "absent") is None


def test_duplicate_apply_is_unchanged(backend):
    backend.apply(namespace())
    first = backend.apply(job())
    again = backend.apply(job())
    assert again.action == "unchanged"
    assert (again.uid, again.resource_version) == (first.uid, first.resource_version)
    assert backend.apply(namespace()).action == "unchanged"  # the server-added label is not ours


def test_changed_object_is_updated(backend):
    """Labels and a mutable spec field (a Job's activeDeadlineSeconds) are patched in place."""
    backend.apply(namespace())
    first = backend.apply(job())
    changed = job(labels={"suanchi.io/priority": "high"})
    changed["spec"]["activeDeadlineSeconds"] = 3600
    updated = backend.apply(changed)
    assert updated.action == "updated" and updated.uid == first.uid
    assert int(updated.resource_version) > int(first.resource_version)
    live = backend.get("Job", "proj-a", "train-1")
    assert live["metadata"]["labels"]["suanchi.io/priority"] == "high"
    assert live["spec"]["activeDeadlineSeconds"] == 3600
    assert live["metadata"]["generation"] == 2
    assert backend.apply(changed).action == "unchanged"


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("spec.template", lambda spec: spec["template"]["spec"]["containers"][0].update(image="pytorch:2.5")),
        ("spec.completionMode", lambda spec: spec.update(completionMode="Indexed")),
        ("spec.podFailurePolicy", lambda spec: spec.update(podFailurePolicy={"rules": []})),
        ("spec.selector", lambda spec: spec.update(selector={"matchLabels": {"a": "b"}})),
    ],
)
def test_an_immutable_job_field_is_refused_with_422_and_nothing_changes(server, kube, field, change):
    """pkg/apis/batch/validation ValidateJobSpecUpdate: the API server refuses the patch (422
    Invalid, ``details.causes[].field``); the backend says which field, and the Job is untouched."""
    kube.apply(namespace())
    first = kube.apply(job())
    changed = job()
    change(changed["spec"])
    with pytest.raises(ImmutableFieldError) as exc:
        kube.apply(changed)
    assert exc.value.status == 422 and exc.value.fields == [field]
    assert f'Job.batch "train-1" is invalid: {field}: Invalid value: ' in exc.value.message
    assert "field is immutable" in exc.value.message
    assert exc.value.live["metadata"]["uid"] == first.uid
    live = kube.get("Job", "proj-a", "train-1")
    assert live["metadata"]["resourceVersion"] == first.resource_version
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "pytorch:2.4"


def test_a_deployments_selector_is_immutable_but_its_template_is_not(server, kube):
    """pkg/apis/apps/validation ValidateDeploymentUpdate: apps/v1 spec.selector is immutable."""
    kube.apply(namespace())
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "svc", "namespace": "proj-a", "labels": MANAGED},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"suanchi.io/job": "svc"}},
            "template": {
                "metadata": {"labels": {"suanchi.io/job": "svc"}},
                "spec": {"containers": [{"name": "main", "image": "vllm:0.5"}]},
            },
        },
    }
    kube.apply(dep)
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm:0.6"
    assert kube.apply(dep).action == "updated"
    dep["spec"]["selector"]["matchLabels"]["suanchi.io/attempt"] = "1"
    with pytest.raises(ImmutableFieldError) as exc:
        kube.apply(dep)
    assert exc.value.fields == ["spec.selector"]
    assert exc.value.message.endswith(
        'Deployment.apps "svc" is invalid: spec.selector: Invalid value: '
        '{"matchLabels": {"suanchi.io/attempt": "1", "suanchi.io/job": "svc"}}: '
        "field is immutable"
    )


def test_list_by_label_selector(backend):
    backend.apply(namespace())
    backend.apply(namespace("proj-b"))
    backend.apply(job("a", labels={"tier": "gold"}))
    backend.apply(job("b", labels={"tier": "silver"}))
    backend.apply(job("c", ns="proj-b"))
    foreign = job("d")
    foreign["metadata"]["labels"] = {"team": "other"}
    backend.apply(foreign)
    names = lambda items: sorted(i["metadata"]["name"] for i in items)  # noqa: E731
    assert names(backend.list_owned("Job")) == ["a", "b", "c"]
    assert names(backend.list_owned("Job", "proj-a")) == ["a", "b"]
    assert names(backend.list_owned("Job", selector="app.kubernetes.io/managed-by=suanchi,tier!=gold")) == [
        "b",
        "c",
    ]
    assert names(backend.list_owned("Job", selector="tier")) == ["a", "b"]
    assert names(backend.list_owned("Job", selector="!tier")) == ["c", "d"]
    assert all(item["kind"] == "Job" for item in backend.list_owned("Job"))


def test_delete_twice(backend):
    backend.apply(namespace())
    backend.apply(job())
    assert backend.delete("Job", "proj-a", "train-1") is True
    assert backend.delete("Job", "proj-a", "train-1") is False
    assert backend.get("Job", "proj-a", "train-1") is None


def test_node_labels_and_taints(backend):
    backend.apply(node())
    taint = {"key": "suanchi.io/quarantine", "value": "xid-79", "effect": "NoSchedule"}
    live = backend.patch_node("gpu-node-1", labels={"suanchi.io/accelerator": "nvidia-h200"}, taints=[taint])
    assert live["metadata"]["labels"] == {
        "kubernetes.io/hostname": "gpu-node-1",
        "suanchi.io/accelerator": "nvidia-h200",
    }
    assert live["spec"]["taints"] == [taint]
    maintenance = {"key": "suanchi.io/maintenance", "effect": "NoExecute"}
    live = backend.patch_node("gpu-node-1", labels={"suanchi.io/accelerator": None}, taints=[maintenance])
    assert live["spec"]["taints"] == [maintenance]  # the list is replaced
    assert "suanchi.io/accelerator" not in live["metadata"]["labels"]
    live = backend.patch_node("gpu-node-1", taints=[])
    assert not live.get("spec", {}).get("taints")
    assert (
        backend.get("Node", None, "gpu-node-1")["metadata"]["resourceVersion"]
        == live["metadata"]["resourceVersion"]
    )
    with pytest.raises(PermanentBackendError):
        backend.patch_node("gpu-node-1", taints=[{"key": "x", "effect": "Sometimes"}])
    with pytest.raises(PermanentBackendError) as exc:
        backend.patch_node("ghost", labels={"a": "b"})
    assert exc.value.status == 404


# -- fault injection (kubernetes only) ------------------------------------------------------------------


def _apply_with_retry(backend, obj, attempts=3):
    errors = []
    for _ in range(attempts):
        try:
            return backend.apply(obj), errors
        except TransientBackendError as e:
            errors.append(e)
    raise AssertionError(f"no success after {attempts} attempts: {errors}")


def test_500_then_success(server, kube):
    kube.apply(namespace())
    server.inject(r"/jobs$", status=500, times=1, method="POST")
    result, errors = _apply_with_retry(kube, job())
    assert len(errors) == 1 and errors[0].status == 500 and "injected fault 500" in errors[0].message
    assert result.action == "created"
    assert [j["metadata"]["name"] for j in server.objects("Job")] == ["train-1"]


def test_timeout_then_retry_makes_no_duplicate(server, kube):
    kube.apply(namespace())
    server.inject(r"/namespaces/proj-a/jobs$", status="timeout", times=1)
    result, errors = _apply_with_retry(kube, job())
    assert len(errors) == 1 and "timed out" in errors[0].message
    # The first request took effect; the retry found it and left it alone.
    assert result.action == "unchanged"
    assert len(server.objects("Job")) == 1 and len(server.objects("Pod")) == 1


def test_connection_reset_mid_request(server, kube):
    kube.apply(namespace())
    server.inject(r"/jobs", status="reset", times=1)
    with pytest.raises(TransientBackendError) as exc:
        kube.apply(job())
    assert "connection" in exc.value.message.lower()
    assert server.objects("Job") == []
    assert kube.apply(job()).action == "created"
    assert len(server.objects("Job")) == 1


def test_connection_refused_is_transient(tmp_path):
    srv = FakeApiServer().start()
    path = kubeconfig_for(srv, tmp_path)
    srv.stop()
    backend = KubernetesBackend(str(path), timeout=0.5)
    with pytest.raises(TransientBackendError):
        backend.apply(namespace())


@pytest.mark.parametrize("code", [400, 422])
def test_4xx_is_permanent_with_the_servers_message(server, kube, code):
    kube.apply(namespace())
    server.inject(r"/jobs$", status=code, times=1)
    with pytest.raises(PermanentBackendError) as exc:
        kube.apply(job())
    assert exc.value.status == code and f"injected fault {code}" in exc.value.message


def test_invalid_name_is_permanent(kube):
    kube.apply(namespace())
    with pytest.raises(PermanentBackendError) as exc:
        kube.apply(job(name="Not_Valid"))
    assert exc.value.status == 422 and 'Job.batch "Not_Valid" is invalid: metadata.name' in exc.value.message


def test_object_the_client_refuses_is_permanent(server, kube):
    kube.apply(namespace())
    bad = job()
    bad["spec"]["bogusField"] = 1
    with pytest.raises(PermanentBackendError) as exc:
        kube.apply(bad)
    assert "invalid object" in exc.value.message and "bogusField" in exc.value.message
    assert server.objects("Job") == []


def test_stale_resource_version_conflict_is_transient(server, kube):
    kube.apply(namespace())
    kube.apply(job())
    orig_get = kube.get

    def stale_get(*args):  # someone else writes between our read and our patch
        live = orig_get(*args)
        server.set_pod_phase("proj-a", server.objects("Pod")[0]["metadata"]["name"], "Running")
        live["metadata"]["resourceVersion"] = "1"
        return live

    kube.get = stale_get
    with pytest.raises(TransientBackendError) as exc:
        kube.apply(job(image="other"))
    assert exc.value.status == 409 and exc.value.reason == "Conflict"


def test_backend_for_chooses_by_cluster(server, tmp_path):
    path = kubeconfig_for(server, tmp_path)
    real = backend_for(
        SimpleNamespace(
            backend="kubernetes", kubeconfig_path=str(path), kube_context="", in_cluster=False, slug="k"
        )
    )
    assert isinstance(real, KubernetesBackend)
    assert real.apply(namespace()).action == "created"
    # Chosen by the ``backend`` field alone: a simulated cluster is the durable simulation.
    assert isinstance(
        backend_for(SimpleNamespace(backend="simulated", slug="sim-x", pk=1)), DurableSimulatedBackend
    )
    with pytest.raises(PermanentBackendError, match="unknown backend"):
        backend_for(SimpleNamespace(backend="openstack", slug="o", pk=2))
    with pytest.raises(PermanentBackendError):
        KubernetesBackend(str(tmp_path / "missing.yaml"))


# -- simulated only -------------------------------------------------------------------------------------


def test_simulated_pod_runs_for_expected_duration(sim):
    sim.apply(namespace())
    sim.apply(job(duration=600))
    (pod,) = sim.pods_of("proj-a", "train-1")
    assert pod["status"]["phase"] == "Pending"
    assert sim.advance(5) == [("proj-a", pod["metadata"]["name"], "Running")]
    assert sim.get("Pod", "proj-a", pod["metadata"]["name"])["status"]["phase"] == "Running"
    assert sim.get("Job", "proj-a", "train-1")["status"]["active"] == 1
    assert sim.advance(500) == []  # 600 s × [0.9, 1.1] has not passed yet
    for _ in range(10):  # bounded
        if sim.advance(60):
            break
    live = sim.get("Pod", "proj-a", pod["metadata"]["name"])
    assert live["status"]["phase"] == "Succeeded"
    assert live["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    status = sim.get("Job", "proj-a", "train-1")["status"]
    assert status["succeeded"] == 1 and status["conditions"][0]["type"] == "Complete"


def test_simulated_is_deterministic_given_seed():
    def run(seed):
        backend = SimulatedBackend(seed=seed)
        backend.apply(namespace())
        for i in range(3):
            backend.apply(job(f"j{i}", duration=100))
        return [backend.advance(20) for _ in range(8)], [
            p["metadata"]["uid"] for p in backend.list_owned("Pod", selector="")
        ]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_simulated_inject_failure(sim):
    sim.apply(namespace())
    sim.apply(job(duration=600))
    sim.advance(10)
    failed = sim.inject_failure("proj-a", "train-1", reason="XidError79")
    (pod,) = sim.pods_of("proj-a", "train-1")
    assert failed == [pod["metadata"]["name"]]
    assert pod["status"]["phase"] == "Failed" and pod["status"]["reason"] == "XidError79"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    assert sim.get("Job", "proj-a", "train-1")["status"]["failed"] == 1
    assert sim.advance(10_000) == []  # a failed pod stays failed
    with pytest.raises(KeyError):
        sim.inject_failure("proj-a", "nothing", reason="x")


def test_simulated_deployment_pods_run_until_deleted(sim):
    sim.apply(namespace())
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "svc", "namespace": "proj-a", "labels": copy.deepcopy(MANAGED)},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "svc"}},
            "template": {
                "metadata": {"labels": {"app": "svc"}},
                "spec": {"containers": [{"name": "m", "image": "vllm"}]},
            },
        },
    }
    sim.apply(deployment)
    sim.advance(3600)
    pods = sim.list_owned("Pod", "proj-a", "app=svc")
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]
    sim.delete("Deployment", "proj-a", "svc")
    assert sim.list_owned("Pod", "proj-a", "app=svc") == []


FOREIGN_TAINTS = [
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},  # kubectl cordon
    {"key": "cluster-autoscaler.kubernetes.io/scale-down", "value": "true", "effect": "PreferNoSchedule"},
]


def test_node_patches_replace_only_suanchis_taints(backend):
    body = node()
    body["spec"] = {"taints": FOREIGN_TAINTS}
    backend.apply(body)
    quarantine = {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"}
    vendor = {"key": "accelerator", "value": "nvidia-gpu", "effect": "NoSchedule"}
    live = backend.patch_node("gpu-node-1", labels={"suanchi.io/pool": "a"}, taints=[vendor, quarantine])
    assert live["spec"]["taints"] == [*FOREIGN_TAINTS, vendor, quarantine]
    live = backend.patch_node("gpu-node-1", labels={"suanchi.io/pool": "b"}, taints=[vendor])
    assert live["spec"]["taints"] == [*FOREIGN_TAINTS, vendor]  # quarantine lifted, cordon kept
    live = backend.patch_node("gpu-node-1", taints=[])
    assert live["spec"]["taints"] == FOREIGN_TAINTS
    assert live["metadata"]["labels"]["suanchi.io/pool"] == "b"


def test_node_patch_reads_again_and_retries_on_a_conflict(server, kube):
    kube.apply(node())
    server.set_node_ready("gpu-node-1", False)  # the node lifecycle controller taints it meanwhile
    server.inject(r"/nodes/gpu-node-1$", status=409, times=2, method="PATCH")
    taint = {"key": "suanchi.io/maintenance", "effect": "NoSchedule"}
    live = kube.patch_node("gpu-node-1", labels={"suanchi.io/pool": "a"}, taints=[taint])
    assert [m for m, p in server.requests if p.endswith("/nodes/gpu-node-1")].count("PATCH") == 3
    keys = [t["key"] for t in live["spec"]["taints"]]
    assert keys == ["node.kubernetes.io/not-ready", "node.kubernetes.io/not-ready", "suanchi.io/maintenance"]


def test_a_stale_node_write_is_refused_not_lost(server, kube):
    """A merge patch carrying an old resourceVersion gets 409 Conflict (optimistic concurrency)."""
    kube.apply(node())
    stale = kube.get("Node", None, "gpu-node-1")["metadata"]["resourceVersion"]
    server.set_node_ready("gpu-node-1", False)
    func, _ = kube._method("patch", "Node")
    with pytest.raises(TransientBackendError) as exc:
        kube._call(
            "patch",
            func,
            "gpu-node-1",
            {"metadata": {"resourceVersion": stale}, "spec": {"taints": None}},
            _content_type="application/merge-patch+json",
        )
    assert exc.value.status == 409
    assert kube.get("Node", None, "gpu-node-1")["spec"]["taints"]  # the not-ready taints survived


# -- merge-patch removal and normalisation (issue 17 item 8) ------------------------------------------


def quota_object(hard, labels=None):
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "suanchi-quota", "namespace": "proj-a", "labels": {**MANAGED, **(labels or {})}},
        "spec": {"hard": hard},
    }


def test_a_dropped_quota_entry_is_removed(backend):
    """RFC 7386 keeps every key a merge patch leaves out: an entry (and a label) Suanchi applied and
    no longer wants must be sent as null, and the comparison must see that it is still there."""
    backend.apply(namespace())
    backend.apply(
        quota_object(
            {"requests.nvidia.com/gpu": "8", "requests.huawei.com/Ascend910": "16"}, {"suanchi.io/tier": "a"}
        )
    )
    # Someone else's label on our object is not ours to remove.
    live = backend.get("ResourceQuota", "proj-a", "suanchi-quota")
    if isinstance(backend, KubernetesBackend):
        backend._call(
            "label",
            backend._method("patch", "ResourceQuota")[0],
            "suanchi-quota",
            "proj-a",
            {"metadata": {"labels": {"team": "ops"}}},
            _content_type="application/merge-patch+json",
        )
    else:
        backend._store[("ResourceQuota", "proj-a", "suanchi-quota")]["metadata"]["labels"]["team"] = "ops"
    updated = backend.apply(quota_object({"requests.nvidia.com/gpu": "8"}))
    assert updated.action == "updated"
    live = backend.get("ResourceQuota", "proj-a", "suanchi-quota")
    assert live["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert "suanchi.io/tier" not in live["metadata"]["labels"]
    assert live["metadata"]["labels"]["team"] == "ops"
    again = backend.apply(quota_object({"requests.nvidia.com/gpu": "8"}))
    assert again.action == "unchanged" and again.resource_version == live["metadata"]["resourceVersion"]


def test_what_the_server_normalises_is_unchanged_and_a_no_op_writes_nothing(server, kube):
    """kube-apiserver stores quantities canonical (``1000m`` → ``1``, ``1024Mi`` → ``1Gi``) and drops
    an empty env value (omitempty): Suanchi compares after the same normalisation, so a second apply
    sends nothing; and a patch that changes nothing keeps the resourceVersion."""
    kube.apply(namespace())
    body = job()
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": "1", "cpu": "1000m", "memory": "1024Mi"}}
    container["env"] = [{"name": "SUANCHI_RESUME_FROM", "value": ""}, {"name": "A", "value": "1"}]
    first = kube.apply(body)
    live = kube.get("Job", "proj-a", "train-1")
    got = live["spec"]["template"]["spec"]["containers"][0]
    assert got["resources"]["limits"] == {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}
    assert got["env"] == [{"name": "SUANCHI_RESUME_FROM"}, {"name": "A", "value": "1"}]
    server.requests.clear()
    assert kube.apply(body).action == "unchanged"  # no 422 for an "immutable template change" either
    assert [m for m, _p in server.requests if m == "PATCH"] == []
    func = kube._method("patch", "Job")[0]
    same = kube._call(
        "noop",
        func,
        "train-1",
        "proj-a",
        {"spec": {"backoffLimit": 0}},
        _content_type="application/merge-patch+json",
    )
    assert same["metadata"]["resourceVersion"] == first.resource_version


def test_the_canonical_quantities_match_the_api_servers():
    from apps.clusters.backends.objects import canonical_quantity as ours
    from tests.kube.fake_apiserver import canonical_quantity as servers

    for q in ("1000m", "0.5", "1024Mi", "1536Mi", "1000", "1500", "8", "2e3", "0", "100Ki", "1.5Gi", "250m"):
        assert ours(q) == servers(q), q
    assert ours("not a quantity") == "not a quantity"


def test_lists_are_read_in_pages_with_limit_and_continue(server, kube, monkeypatch):
    """Reconcile lists every owned object of a cluster: in pages (``limit`` / ``continue``), never one
    unbounded answer (issue 20, reconcile at scale)."""
    from apps.clusters.backends import kubernetes as kubernetes_module

    monkeypatch.setattr(kubernetes_module, "LIST_PAGE_SIZE", 2)
    for i in range(5):
        kube.apply(namespace(f"proj-{i}"))
    server.requests.clear()
    listed = kube.list_owned("Namespace")
    assert sorted(o["metadata"]["name"] for o in listed) == [f"proj-{i}" for i in range(5)]
    assert all(o["kind"] == "Namespace" for o in listed)
    assert [r for r in server.requests if r == ("GET", "/api/v1/namespaces")] == [
        ("GET", "/api/v1/namespaces")
    ] * 3
