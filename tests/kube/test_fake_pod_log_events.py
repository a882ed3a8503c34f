"""The fake API server's pod log subresource and the events its pod lifecycle records, through the
official client (CoreV1Api.read_namespaced_pod_log, list_namespaced_event) as kube-apiserver,
kube-scheduler and the kubelet answer them (Kubernetes API reference, Pod v1 "read log" and Event
v1 "list"; pkg/registry/core/pod/strategy.go LogLocation; pkg/kubelet/kubelet_pods.go
validateContainerLogStatus)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

NS = "proj-a"


def make_pod(core, name="train-0", containers=("main",), node="gpu-1"):
    spec = {
        "restartPolicy": "Never",
        "containers": [{"name": c, "image": f"{c}:1.0"} for c in containers],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    core.create_namespaced_pod(
        NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    )
    return name


@pytest.fixture
def cluster(fake_server, fake_core):
    fake_server.add_node("gpu-1")
    fake_core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return fake_server


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def raw_log(core, name, **kwargs):
    response = core.read_namespaced_pod_log(name, NS, _preload_content=False, **kwargs)
    return response.headers.get("Content-Type"), response.data.decode()


# -- log ----------------------------------------------------------------------------------------------


def test_the_log_is_plain_text_cut_by_tail_lines_then_limit_bytes(cluster, fake_core):
    make_pod(fake_core)
    cluster.set_pod_phase(NS, "train-0", "Running")
    cluster.set_pod_log(NS, "train-0", "".join(f"line {i}\n" for i in range(1, 11)))
    content_type, text = raw_log(fake_core, "train-0")
    assert content_type == "text/plain" and text.endswith("line 10\n") and text.startswith("line 1\n")
    assert raw_log(fake_core, "train-0", tail_lines=3)[1] == "line 8\nline 9\nline 10\n"
    assert raw_log(fake_core, "train-0", tail_lines=3, limit_bytes=9)[1] == "line 8\nli"
    assert raw_log(fake_core, "train-0", tail_lines=0)[1] == ""
    # The client's own (preloaded) answer is the text as a str.
    assert fake_core.read_namespaced_pod_log("train-0", NS, tail_lines=1) == "line 10\n"


def test_invalid_log_options_are_422(cluster, fake_core):
    make_pod(fake_core)
    cluster.set_pod_phase(NS, "train-0", "Running")
    with pytest.raises(ApiException) as bad:
        fake_core.read_namespaced_pod_log("train-0", NS, tail_lines=-1, limit_bytes=0)
    body = status_of(bad.value)
    assert bad.value.status == 422 and body["reason"] == "Invalid"
    assert {c["field"] for c in body["details"]["causes"]} == {"tailLines", "limitBytes"}


def test_a_pod_with_several_containers_needs_the_container_named(cluster, fake_core):
    make_pod(fake_core, containers=("main", "sidecar"))
    cluster.set_pod_phase(NS, "train-0", "Running")
    cluster.set_pod_log(NS, "train-0", "from the sidecar\n", container="sidecar")
    with pytest.raises(ApiException) as bad:
        fake_core.read_namespaced_pod_log("train-0", NS)
    assert bad.value.status == 400
    assert status_of(bad.value)["message"] == (
        "a container name must be specified for pod train-0, choose one of: [main sidecar]"
    )
    assert fake_core.read_namespaced_pod_log("train-0", NS, container="sidecar") == "from the sidecar\n"
    with pytest.raises(ApiException) as bad:
        fake_core.read_namespaced_pod_log("train-0", NS, container="nope")
    assert status_of(bad.value)["message"] == "container nope is not valid for pod train-0"


def test_a_missing_pod_is_404(cluster, fake_core):
    with pytest.raises(ApiException) as missing:
        fake_core.read_namespaced_pod_log("ghost", NS)
    assert missing.value.status == 404 and status_of(missing.value)["message"] == 'pods "ghost" not found'


def test_a_container_that_has_not_started_is_waiting_and_an_unbound_pod_has_no_log(cluster, fake_core):
    make_pod(fake_core)  # bound to gpu-1 by the scheduler, containers not started
    with pytest.raises(ApiException) as waiting:
        fake_core.read_namespaced_pod_log("train-0", NS)
    assert waiting.value.status == 400
    assert status_of(waiting.value)["message"] == (
        'container "main" in pod "train-0" is waiting to start: ContainerCreating'
    )
    make_pod(fake_core, name="nowhere", node="no-such-node")  # never bound: no log location
    assert raw_log(fake_core, "nowhere")[1] == ""


def test_previous_reads_the_last_terminated_instance(cluster, fake_core):
    make_pod(fake_core)
    cluster.set_pod_phase(NS, "train-0", "Running")
    with pytest.raises(ApiException) as none:
        fake_core.read_namespaced_pod_log("train-0", NS, previous=True)
    assert (
        status_of(none.value)["message"] == 'previous terminated container "main" in pod "train-0" not found'
    )
    cluster.set_pod_crash_loop(NS, "train-0", restarts=2)
    cluster.set_pod_log(NS, "train-0", "Traceback: CUDA error\n", previous=True)
    assert fake_core.read_namespaced_pod_log("train-0", NS, previous=True) == "Traceback: CUDA error\n"
    # Back-off: the current instance has not run, the log is the last terminated one's (empty here).
    assert fake_core.read_namespaced_pod_log("train-0", NS) == ""


# -- events -------------------------------------------------------------------------------------------


def reasons(core, name):
    items = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.type, e.source.component) for e in items]


def test_the_pod_lifecycle_records_scheduler_and_kubelet_events(cluster, fake_core):
    make_pod(fake_core)
    make_pod(fake_core, name="other")
    assert reasons(fake_core, "train-0") == [("Scheduled", "Normal", "default-scheduler")]
    cluster.set_pod_phase(NS, "train-0", "Running")
    cluster.set_pod_phase(NS, "train-0", "Running")  # no second start: no second round of events
    got = reasons(fake_core, "train-0")
    # Listed in name order (<pod>.<hex>), as the API lists them: compare as multisets.
    assert sorted(r for r, _t, _c in got) == ["Created", "Pulled", "Scheduled", "Started"]
    messages = {
        e.reason: e.message
        for e in fake_core.list_namespaced_event(NS).items
        if e.involved_object.name == "train-0"
    }
    assert messages["Scheduled"] == f"Successfully assigned {NS}/train-0 to gpu-1"
    assert messages["Started"] == "Started container main"
    assert messages["Pulled"] == 'Container image "main:1.0" already present on machine'
    fake_core.delete_namespaced_pod("train-0", NS)  # graceful: the kubelet stops the running container
    assert ("Killing", "Normal", "kubelet") in reasons(fake_core, "train-0")
    # The other pod's events are not the first one's.
    assert [r for r, _t, _c in reasons(fake_core, "other")] == ["Scheduled"]


def test_a_crash_loop_is_a_backoff_warning_counted_once_per_repeat(cluster, fake_core):
    make_pod(fake_core)
    cluster.set_pod_phase(NS, "train-0", "Running")
    cluster.set_pod_crash_loop(NS, "train-0", restarts=1)
    cluster.set_pod_crash_loop(NS, "train-0", restarts=2)
    (backoff,) = [
        e
        for e in fake_core.list_namespaced_event(
            NS, field_selector="involvedObject.name=train-0,reason=BackOff"
        ).items
    ]
    assert backoff.type == "Warning" and backoff.count == 2
    assert backoff.message.startswith("Back-off restarting failed container main in pod train-0_proj-a(")


def test_events_are_an_event_list_paged_with_limit_and_continue(cluster, fake_core, fake_api):
    for i in range(3):
        make_pod(fake_core, name=f"p{i}")
    response = fake_core.list_namespaced_event(
        NS, field_selector="involvedObject.kind=Pod", limit=2, _preload_content=False
    )
    first = json.loads(response.data)
    assert first["kind"] == "EventList" and len(first["items"]) == 2
    token = first["metadata"]["continue"]
    rest = fake_core.list_namespaced_event(
        NS, field_selector="involvedObject.kind=Pod", limit=2, _continue=token
    )
    names = {e["involvedObject"]["name"] for e in first["items"]} | {
        e.involved_object.name for e in rest.items
    }
    assert names == {"p0", "p1", "p2"} and not rest.metadata._continue
    with pytest.raises(ApiException) as bad:
        fake_core.list_namespaced_event(NS, field_selector="involvedObject.color=red")
    assert bad.value.status == 400
