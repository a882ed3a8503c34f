"""The fake API server behaves as kube-apiserver and the controllers do, seen through the official
client: deletion propagation and graceful pod termination (garbage collector, kubelet), taint-based
eviction (taint-eviction controller, node lifecycle), the Job controller's conditions."""

from __future__ import annotations

import json

import pytest

from apps.clusters.backends.kubernetes import KubernetesBackend
from tests.kube.fake_apiserver import kubeconfig_for


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


# -- ResourceQuota admission ------------------------------------------------------------------------


def quota(hard, name="suanchi-quota"):
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": name,
            "namespace": "proj-a",
            "labels": {"app.kubernetes.io/managed-by": "suanchi"},
        },
        "spec": {"hard": hard},
    }


def gpu_job(name, gpus=1, parallelism=1):
    body = job(name, parallelism=parallelism)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return body


def test_a_pod_over_a_resource_quota_is_forbidden_and_its_job_records_failed_create(server, cluster):
    """staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota: 403 ``exceeded quota``; the
    Job controller reports FailedCreate (an Event) and the Job has no pods until the quota allows."""
    cluster.apply(quota({"requests.nvidia.com/gpu": "2", "limits.nvidia.com/gpu": "2", "pods": "10"}))
    cluster.apply(gpu_job("a", gpus=2))  # the limit defaults the request: 2 of 2
    (live,) = server.objects("ResourceQuota", "proj-a")
    assert live["status"]["used"]["requests.nvidia.com/gpu"] == "2"
    assert live["status"]["used"]["limits.nvidia.com/gpu"] == "0"  # never counted for extended resources
    cluster.apply(gpu_job("b", gpus=1))
    assert pods(server, "b") == []
    (b,) = [j for j in server.objects("Job", "proj-a") if j["metadata"]["name"] == "b"]
    assert not b["status"].get("active")
    events = cluster.list_events(field_selector="reason=FailedCreate")
    (event,) = [e for e in events if e["involvedObject"]["uid"] == b["metadata"]["uid"]]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Job"
    assert event["message"].startswith('Error creating: pods "b-')
    assert event["message"].endswith(
        "is forbidden: exceeded quota: suanchi-quota, requested: requests.nvidia.com/gpu=1, "
        "used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2"
    )
    server.advance(9)
    assert len(cluster.list_events(field_selector="reason=FailedCreate")) == 1
    server.advance(1)  # the controller tries again after its backoff: refused again (another pod name)
    again = cluster.list_events(field_selector="involvedObject.name=b,reason=FailedCreate")
    assert len(again) == 2 and all("exceeded quota: suanchi-quota" in e["message"] for e in again)
    server.set_pod_phase("proj-a", pods(server, "a")[0]["metadata"]["name"], "Succeeded")  # frees the cards
    server.advance(10)
    assert len(pods(server, "b")) == 1


def test_a_direct_pod_create_over_quota_is_403_with_the_quota_message(server, cluster):
    from apps.clusters.backends.errors import PermanentBackendError

    cluster.apply(quota({"cpu": "1", "requests.memory": "1Gi"}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "proj-a",
            "labels": {"app.kubernetes.io/managed-by": "suanchi"},
        },
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1500m", "memory": "512Mi"}}}
            ]
        },
    }
    with pytest.raises(PermanentBackendError) as exc:
        cluster.apply(pod)
    assert exc.value.status == 403 and exc.value.reason == "Forbidden"
    assert exc.value.message.endswith(
        'pods "p" is forbidden: exceeded quota: suanchi-quota, requested: cpu=1500m, used: cpu=0, limited: cpu=1'
    )
    assert server.objects("Pod", "proj-a") == []


def test_quota_quantities_are_stored_canonical():
    from tests.kube.fake_apiserver import canonical_quantity

    assert [
        canonical_quantity(q) for q in ("1000m", "0.5", "1024Mi", "1536Mi", "1000", "1500", "8", "2e3")
    ] == ["1", "500m", "1Gi", "1536Mi", "1k", "1500", "8", "2k"]


# -- Deployments ------------------------------------------------------------------------------------


def deployment(image="vllm:0.5", replicas=1):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "svc",
            "namespace": "proj-a",
            "labels": {"app.kubernetes.io/managed-by": "suanchi"},
        },
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"suanchi.io/job": "svc"}},
            "template": {
                "metadata": {"labels": {"suanchi.io/job": "svc", "app.kubernetes.io/managed-by": "suanchi"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "gpu-1"},
                    "containers": [{"name": "main", "image": image}],
                },
            },
        },
    }


def svc_pods(server):
    return [
        p for p in server.objects("Pod", "proj-a") if p["metadata"]["labels"].get("suanchi.io/job") == "svc"
    ]


def test_a_deployment_template_change_rolls_out_a_new_replica_set_and_scaling_adds_pods(server, cluster):
    cluster.apply(deployment())
    (rs1,) = server.objects("ReplicaSet", "proj-a")
    (pod,) = svc_pods(server)
    assert pod["metadata"]["ownerReferences"][0]["uid"] == rs1["metadata"]["uid"]
    assert pod["metadata"]["labels"]["pod-template-hash"] == rs1["metadata"]["labels"]["pod-template-hash"]
    server.set_pod_phase("proj-a", pod["metadata"]["name"], "Running")

    cluster.apply(deployment(replicas=2))  # same template: the same ReplicaSet, one more pod
    assert len(server.objects("ReplicaSet", "proj-a")) == 1 and len(svc_pods(server)) == 2

    cluster.apply(deployment(image="vllm:0.6", replicas=2))  # Recreate: old pods go first
    sets = {r["metadata"]["name"]: r for r in server.objects("ReplicaSet", "proj-a")}
    assert len(sets) == 2 and sets[rs1["metadata"]["name"]]["spec"]["replicas"] == 0
    assert all(p["metadata"].get("deletionTimestamp") for p in svc_pods(server))  # nothing new yet
    server.advance(30)
    server.advance(0)
    new = svc_pods(server)
    assert len(new) == 2 and {p["spec"]["containers"][0]["image"] for p in new} == {"vllm:0.6"}
    assert not any(p["metadata"].get("deletionTimestamp") for p in new)
    cluster.delete("Deployment", "proj-a", "svc")  # Background: the ReplicaSets, then their pods
    assert server.objects("ReplicaSet", "proj-a") == []
    assert all(
        p["metadata"].get("deletionTimestamp") or "nodeName" not in p["spec"] for p in svc_pods(server)
    )
