"""The fake API server validates, defaults and answers like kube-apiserver, through the official
client: 422 Invalid with ``details.causes``, server-side defaults, error texts with the API group,
namespace termination (NamespaceLifecycle), list shape, set-based selectors, ``limit`` / ``continue``."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.kube.fake_apiserver import FakeApiServer
from tests.kube.helpers import fake_client_fixtures

server, api, core = fake_client_fixtures()


@pytest.fixture
def batch(api):
    return k8s.BatchV1Api(api)


@pytest.fixture
def ns(server, core):
    server.add_node("gpu-1")
    core.create_namespace({"metadata": {"name": "proj-a"}})
    return "proj-a"


def pod(name="p", resources=None, labels=None, node="gpu-1"):
    container = {"name": "main", "image": "pytorch:2.4"}
    if resources is not None:
        container["resources"] = resources
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [container],
        },
    }


def job(name="train-1", restart_policy="Never"):
    spec = {"containers": [{"name": "main", "image": "pytorch:2.4"}]}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": spec}},
    }


def error(call, *args, **kw) -> tuple[int, dict]:
    with pytest.raises(ApiException) as exc:
        call(*args, **kw)
    return exc.value.status, json.loads(exc.value.body)


def causes(status: dict) -> dict[str, dict]:
    return {c["field"]: c for c in status["details"]["causes"]}


# -- names and labels -------------------------------------------------------------------------------


def test_names_follow_the_rule_of_their_kind(server, core, batch, ns):
    code, status = error(core.create_namespaced_pod, ns, pod("Bad_Name"))
    assert code == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith(
        'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
    )
    assert "a lowercase RFC 1123 subdomain must consist of" in status["message"]
    assert status["details"] == {
        "name": "Bad_Name",
        "group": "",
        "kind": "Pod",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "field": "metadata.name",
                "message": status["message"].split("metadata.name: ", 1)[1],
            }
        ],
    }
    # A pod name may have dots (a subdomain), a namespace name may not (a DNS label).
    core.create_namespaced_pod(ns, pod("worker.0"))
    code, status = error(core.create_namespace, {"metadata": {"name": "team.a"}})
    assert code == 422 and "a lowercase RFC 1123 label must consist of" in status["message"]
    assert server.objects("Namespace", None) and not [
        n for n in server.objects("Namespace") if n["metadata"]["name"] == "team.a"
    ]


def test_a_job_name_over_63_characters_is_refused_through_its_job_name_label(batch, ns):
    name = "j" * 64
    code, status = error(batch.create_namespaced_job, ns, job(name))
    assert code == 422 and status["message"].startswith(f'Job.batch "{name}" is invalid: [')
    assert status["details"]["group"] == "batch" and status["details"]["kind"] == "Job"
    (cause, *_) = status["details"]["causes"]
    assert cause == {
        "reason": "FieldValueInvalid",
        "field": "spec.template.labels",
        "message": f'Invalid value: "{name}": must be no more than 63 characters',
    }
    batch.create_namespaced_job(ns, job("j" * 63))


def test_label_keys_and_values_are_validated(core, ns):
    code, status = error(
        core.create_namespaced_pod,
        ns,
        pod(labels={"suanchi.io/bad key": "x", "ok": "-starts-with-dash", "long": "v" * 64}),
    )
    assert code == 422
    messages = [c["message"] for c in status["details"]["causes"] if c["field"] == "metadata.labels"]
    assert len(messages) == 3
    assert any("must be no more than 63 characters" in m for m in messages)
    assert any(
        m.startswith('Invalid value: "suanchi.io/bad key": name part must consist of') for m in messages
    )
    assert any("a valid label must be an empty string or consist of" in m for m in messages)


# -- resources and defaults -------------------------------------------------------------------------


def test_extended_resources_must_be_integers_with_requests_equal_to_limits(core, ns):
    code, status = error(
        core.create_namespaced_pod,
        ns,
        pod(resources={"limits": {"nvidia.com/gpu": "500m"}, "requests": {"nvidia.com/gpu": "500m"}}),
    )
    found = causes(status)
    assert code == 422
    assert (
        found["spec.containers[0].resources.limits[nvidia.com/gpu]"]["message"]
        == 'Invalid value: "500m": must be an integer'
    )
    code, status = error(
        core.create_namespaced_pod,
        ns,
        pod(resources={"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}),
    )
    assert causes(status)["spec.containers[0].resources.requests[nvidia.com/gpu]"]["message"] == (
        'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2'
    )
    code, status = error(core.create_namespaced_pod, ns, pod(resources={"requests": {"nvidia.com/gpu": "1"}}))
    assert causes(status)["spec.containers[0].resources.limits"] == {
        "reason": "FieldValueRequired",
        "field": "spec.containers[0].resources.limits",
        "message": "Required value: Limit must be set for non overcommitable resources",
    }
    code, status = error(
        core.create_namespaced_pod, ns, pod(resources={"limits": {"cpu": "1"}, "requests": {"cpu": "2"}})
    )
    assert "must be less than or equal to cpu limit of 1" in status["message"]


def test_limits_default_requests_and_tolerations_are_added(core, ns):
    created = core.create_namespaced_pod(
        ns,
        pod(
            resources={"limits": {"nvidia.com/gpu": "2", "memory": "1024Mi"}, "requests": {"memory": "512Mi"}}
        ),
    )
    assert created.spec.containers[0].resources.requests == {"nvidia.com/gpu": "2", "memory": "512Mi"}
    assert created.spec.restart_policy == "Never"
    tolerations = sorted(
        (t.key, t.operator, t.effect, t.toleration_seconds) for t in created.spec.tolerations
    )
    assert tolerations == [
        ("node.kubernetes.io/not-ready", "Exists", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "Exists", "NoExecute", 300),
    ]


def test_a_job_template_must_not_restart_always(batch, ns):
    for policy in ("Always", None):  # an absent restartPolicy defaults to Always
        code, status = error(batch.create_namespaced_job, ns, job(restart_policy=policy))
        assert code == 422
        assert causes(status)["spec.template.spec.restartPolicy"] == {
            "reason": "FieldValueNotSupported",
            "field": "spec.template.spec.restartPolicy",
            "message": 'Unsupported value: "Always": supported values: "OnFailure", "Never"',
        }
    assert (
        batch.create_namespaced_job(ns, job(restart_policy="OnFailure")).spec.template.spec.restart_policy
        == "OnFailure"
    )


def test_taints_must_be_unique_by_key_and_effect(server, core):
    server.add_node("gpu-2")
    taints = [
        {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"},
        {"key": "suanchi.io/quarantine", "value": "false", "effect": "NoExecute"},
        {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoSchedule"},
    ]
    code, status = error(core.patch_node, "gpu-2", {"spec": {"taints": taints}})
    assert code == 422 and status["message"].startswith(
        'Node "gpu-2" is invalid: spec.taints[1]: Duplicate value: '
    )
    (cause,) = status["details"]["causes"]
    assert cause["reason"] == "FieldValueDuplicate" and cause["message"].endswith(
        ": taints must be unique by key and effect pair"
    )
    assert not core.read_node("gpu-2").spec.taints  # nothing written
    core.patch_node("gpu-2", {"spec": {"taints": [taints[0], taints[2]]}})
    assert len(core.read_node("gpu-2").spec.taints) == 2


# -- error texts --------------------------------------------------------------------------------------


def test_error_texts_name_the_group_like_the_real_server(core, batch, ns):
    assert error(batch.read_namespaced_job, "x", ns)[1]["message"] == 'jobs.batch "x" not found'
    assert error(core.read_namespaced_pod, "x", ns)[1]["message"] == 'pods "x" not found'
    batch.create_namespaced_job(ns, job("x"))
    code, status = error(batch.create_namespaced_job, ns, job("x"))
    assert (code, status["reason"], status["message"]) == (
        409,
        "AlreadyExists",
        'jobs.batch "x" already exists',
    )
    assert status["details"] == {"name": "x", "group": "batch", "kind": "jobs"}
    code, status = error(
        batch.patch_namespaced_job, "x", ns, {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}}
    )
    assert code == 409 and status["message"].startswith('Operation cannot be fulfilled on jobs.batch "x": ')


# -- namespace termination ------------------------------------------------------------------------------


def test_a_deleted_namespace_is_terminating_while_its_pods_stop_and_refuses_new_content(
    server, core, batch, ns
):
    core.create_namespaced_pod(ns, pod("runner"))
    server.set_pod_phase(ns, "runner", "Running")
    # The answer is the Namespace itself (the client's generated type says V1Status: read the JSON).
    answer = json.loads(core.delete_namespace(ns, _preload_content=False).data)
    assert answer["kind"] == "Namespace" and answer["status"]["phase"] == "Terminating"
    assert answer["metadata"]["deletionTimestamp"]
    live = core.read_namespace(ns)
    assert live.status.phase == "Terminating"
    assert core.read_namespaced_pod("runner", ns).metadata.deletion_timestamp is not None
    code, status = error(batch.create_namespaced_job, ns, job("late"))
    assert (code, status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        'jobs.batch "late" is forbidden: unable to create new content in namespace proj-a because it is being terminated'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": "namespace proj-a is being terminated",
            "field": "metadata.namespace",
        }
    ]
    code, status = error(core.create_namespace, {"metadata": {"name": ns}})
    assert code == 409 and status["message"] == 'object is being deleted: namespaces "proj-a" already exists'
    server.advance(31)  # the grace period ends: the kubelet stops the pod (Failed, still Terminating)
    assert core.read_namespace(ns).status.phase == "Terminating"
    server.advance(1)  # and removes it; the namespace controller finishes
    assert error(core.read_namespace, ns)[0] == 404
    core.create_namespace({"metadata": {"name": ns}})


# -- lists --------------------------------------------------------------------------------------------


def test_list_items_carry_no_kind_and_set_based_selectors_work(core, ns, api):
    for i, tier in enumerate(["gold", "silver", "bronze"]):
        core.create_namespaced_pod(ns, pod(f"p{i}", labels={"tier": tier, **({"gpu": "yes"} if i else {})}))
    response = core.list_namespaced_pod(ns, _preload_content=False)
    body = json.loads(response.data)
    assert (body["kind"], body["apiVersion"]) == ("PodList", "v1")
    assert all("kind" not in i and "apiVersion" not in i for i in body["items"])

    def names(selector):
        return [p.metadata.name for p in core.list_namespaced_pod(ns, label_selector=selector).items]

    assert names("tier in (gold, bronze)") == ["p0", "p2"]
    assert names("tier notin (gold),gpu") == ["p1", "p2"]
    assert names("!gpu") == ["p0"]
    assert names("gpu,tier!=silver") == ["p2"]
    assert names("missing notin (x)") == ["p0", "p1", "p2"]
    assert error(core.list_namespaced_pod, ns, label_selector="tier in ()")[0] == 400


def test_limit_and_continue_page_a_consistent_snapshot_and_expire_after_compaction(server, core, ns):
    for i in range(5):
        core.create_namespaced_pod(ns, pod(f"p{i}"))
    first = core.list_namespaced_pod(ns, limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    core.create_namespaced_pod(ns, pod("p10"))  # after the first page: not in this list
    core.delete_namespaced_pod("p4", ns, grace_period_seconds=0)
    second = core.list_namespaced_pod(ns, limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in second.items] == ["p2", "p3"]
    assert second.metadata.resource_version == first.metadata.resource_version
    third = core.list_namespaced_pod(ns, limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in third.items] == ["p4"] and not third.metadata._continue
    again = core.list_namespaced_pod(ns, limit=2)
    server.compact()
    code, status = error(core.list_namespaced_pod, ns, limit=2, _continue=again.metadata._continue)
    assert (code, status["reason"]) == (410, "Expired")
    assert status["message"].startswith("The provided continue parameter is too old")
    assert [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["p0", "p1", "p10", "p2", "p3"]


def test_server_objects_and_constructor_are_unchanged():
    with FakeApiServer(controllers=False, timeout_delay=1.0) as srv:
        srv.add_node("n1")
        (node,) = srv.objects("Node")
        assert node["kind"] == "Node" and node["apiVersion"] == "v1"


def test_services_are_dns_1035_labels_and_get_their_defaults(core, ns):
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "1-rendezvous"},
        "spec": {"clusterIP": "None", "ports": [{"name": "master", "port": 29500}]},
    }
    code, status = error(core.create_namespaced_service, ns, body)
    assert code == 422 and "a DNS-1035 label must consist of" in status["message"]
    body["metadata"]["name"] = "gang-7"
    created = core.create_namespaced_service(ns, body)
    assert (created.spec.type, created.spec.cluster_ip, created.spec.session_affinity) == (
        "ClusterIP",
        "None",
        "None",
    )
    assert (created.spec.ports[0].protocol, created.spec.ports[0].target_port) == ("TCP", 29500)
