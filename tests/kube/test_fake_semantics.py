"""The fake API server behaves as kube-apiserver and the controllers do, seen through the official
client: deletion propagation and graceful pod termination (garbage collector, kubelet), taint-based
eviction (taint-eviction controller, node lifecycle), the Job controller's conditions."""

from __future__ import annotations

import json

import pytest

from apps.clusters.backend import KubernetesBackend
from tests.kube.fake_apiserver import FakeApiServer, kubeconfig_for


@pytest.fixture
def server():
    srv = FakeApiServer(timeout_delay=1.5).start()
    yield srv
    srv.stop()


@pytest.fixture
def kube(server, tmp_path):
    backend = KubernetesBackend(str(kubeconfig_for(server, tmp_path)), timeout=2)
    yield backend
    backend.close()


def job(name="train-1", node="gpu-1", tolerations=None, parallelism=1, indexed=False):
    spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "main", "image": "pytorch:2.3"}],
    }
    if tolerations:
        spec["tolerations"] = tolerations
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "proj-a",
            "labels": {"app.kubernetes.io/managed-by": "suanchi"},
        },
        "spec": {
            "backoffLimit": 0,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"metadata": {"labels": {"app.kubernetes.io/managed-by": "suanchi"}}, "spec": spec},
        },
    }
    if indexed:
        body["spec"]["completionMode"] = "Indexed"
    return body


@pytest.fixture
def cluster(server, kube):
    server.add_node("gpu-1")
    server.add_node("gpu-2")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "proj-a"}})
    return kube


def pods(server, job_name):
    return [p for p in server.objects("Pod", "proj-a") if p["metadata"]["labels"].get("job-name") == job_name]


def conditions(server, name="train-1"):
    (live,) = [j for j in server.objects("Job", "proj-a") if j["metadata"]["name"] == name]
    return [c["type"] for c in live.get("status", {}).get("conditions", [])]


# -- deletion -----------------------------------------------------------------------------------------


def test_a_background_delete_removes_the_job_and_its_pods_terminate_before_they_go(server, cluster):
    cluster.apply(job())
    (pod,) = pods(server, "train-1")
    assert pod["spec"]["nodeName"] == "gpu-1"  # bound by the scheduler
    server.set_pod_phase("proj-a", pod["metadata"]["name"], "Running")
    assert cluster.delete("Job", "proj-a", "train-1") is True  # Suanchi deletes with Background
    assert server.objects("Job", "proj-a") == []
    (pod,) = pods(server, "train-1")
    assert pod["metadata"]["deletionTimestamp"] and pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert pod["status"]["phase"] == "Running"  # Terminating, still running
    server.advance(29)
    assert pods(server, "train-1")[0]["status"]["phase"] == "Running"
    server.advance(1)
    (pod,) = pods(server, "train-1")
    assert pod["status"]["phase"] == "Failed"  # stopped, still listed, still labelled
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    server.advance(0)
    assert pods(server, "train-1") == []


def test_a_job_deleted_without_a_policy_orphans_its_pods_with_a_warning(server, cluster):
    cluster.apply(job())
    response = cluster._apis["BatchV1Api"].delete_namespaced_job("train-1", "proj-a", _preload_content=False)
    assert "child pods are preserved" in response.headers.get("Warning", "")
    assert json.loads(response.data)["status"] == "Success"
    (pod,) = pods(server, "train-1")
    assert pod["metadata"]["ownerReferences"] == [] and not pod["metadata"].get("deletionTimestamp")
    server.advance(60)
    assert len(pods(server, "train-1")) == 1  # nobody removes an orphan


def test_a_foreground_delete_keeps_the_job_until_its_pods_are_gone(server, cluster):
    cluster.apply(job())
    (pod,) = pods(server, "train-1")
    server.set_pod_phase("proj-a", pod["metadata"]["name"], "Running")
    cluster._apis["BatchV1Api"].delete_namespaced_job(
        "train-1", "proj-a", propagation_policy="Foreground", _preload_content=False
    )
    (live,) = server.objects("Job", "proj-a")
    assert live["metadata"]["deletionTimestamp"] and "foregroundDeletion" in live["metadata"]["finalizers"]
    server.advance(30)
    server.advance(0)
    assert pods(server, "train-1") == [] and server.objects("Job", "proj-a") == []


def test_a_pending_pod_that_was_never_bound_is_deleted_at_once(server, cluster):
    cluster.apply(job(node="nowhere"))
    (pod,) = pods(server, "train-1")
    assert "nodeName" not in pod["spec"]
    cluster.delete("Job", "proj-a", "train-1")
    assert pods(server, "train-1") == []


# -- taints -------------------------------------------------------------------------------------------


def test_a_no_execute_taint_evicts_every_pod_that_does_not_tolerate_it(server, cluster):
    cluster.apply(job("a"))
    cluster.apply(job("b", tolerations=[{"key": "suanchi.io/quarantine", "operator": "Exists"}]))
    cluster.apply(job("c", node="gpu-2"))
    for name in ("a", "b", "c"):
        server.set_pod_phase("proj-a", pods(server, name)[0]["metadata"]["name"], "Running")
    cluster.patch_node(
        "gpu-1", taints=[{"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"}]
    )
    (evicted,) = pods(server, "a")
    (cond,) = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert cond["reason"] == "DeletionByTaintManager" and evicted["metadata"]["deletionTimestamp"]
    assert not pods(server, "b")[0]["metadata"].get("deletionTimestamp")  # tolerates it
    assert not pods(server, "c")[0]["metadata"].get("deletionTimestamp")  # another node
    assert "Failed" not in conditions(server, "a")
    server.advance(30)  # the kubelet stops it: the Job (backoffLimit 0) fails
    assert conditions(server, "a") == ["FailureTarget", "Failed"]
    server.advance(0)
    assert pods(server, "a") == []


def test_a_not_ready_node_evicts_its_pods_after_the_default_300_seconds(server, cluster):
    cluster.apply(job())
    server.set_pod_phase("proj-a", pods(server, "train-1")[0]["metadata"]["name"], "Running")
    node = server.set_node_ready("gpu-1", False)
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"} in [
        {k: t[k] for k in ("key", "effect")} for t in node["spec"]["taints"]
    ]
    server.advance(299)
    assert not pods(server, "train-1")[0]["metadata"].get("deletionTimestamp")
    server.advance(1)
    (pod,) = pods(server, "train-1")
    assert pod["metadata"]["deletionTimestamp"]
    assert [c["reason"] for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
        "DeletionByTaintManager"
    ]
    unreachable = server.set_node_ready("gpu-2", None)
    assert {t["key"] for t in unreachable["spec"]["taints"]} == {"node.kubernetes.io/unreachable"}
    assert "taints" not in server.set_node_ready("gpu-2", True)["spec"]


# -- the Job controller -------------------------------------------------------------------------------


def test_a_job_with_n_replicas_gets_n_pods_and_completes_after_n_successes(server, cluster):
    cluster.apply(job(parallelism=2, indexed=True))
    two = pods(server, "train-1")
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in two) == [
        "0",
        "1",
    ]
    server.set_pod_phase("proj-a", two[0]["metadata"]["name"], "Succeeded")
    assert conditions(server) == []
    server.set_pod_phase("proj-a", two[1]["metadata"]["name"], "Succeeded")
    assert conditions(server) == ["SuccessCriteriaMet", "Complete"]
