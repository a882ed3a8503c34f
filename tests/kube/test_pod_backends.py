"""``pod_events`` / ``pod_log`` of both cluster backends (issue 21): the kubernetes one through the
official client against the fake API server, the simulated one made up from the pod's lifecycle."""

from __future__ import annotations

import pytest

from apps.clusters.backends.errors import PermanentBackendError
from apps.clusters.backends.kubernetes import KubernetesBackend
from apps.clusters.backends.simulated_durable import FaithfulSimulatedBackend
from apps.clusters.backends.simulated_memory import SimulatedBackend
from tests.kube.fake_apiserver import kubeconfig_for

NS = "proj-a"


def namespace():
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}


def batch_job(name="train-1", containers=("main",), duration=None):
    annotations = {"suanchi.io/expected-duration-seconds": str(duration)} if duration else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"suanchi.io/job": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": "gpu-1"},
                    "containers": [{"name": c, "image": f"{c}:2.4"} for c in containers],
                },
            },
        },
    }


# -- kubernetes -------------------------------------------------------------------------------------


@pytest.fixture
def server(server):
    """The conftest's fake API server, with one node."""
    server.add_node("gpu-1")
    return server


@pytest.fixture
def kube(server, tmp_path):
    backend = KubernetesBackend(str(kubeconfig_for(server, tmp_path)), timeout=1)
    backend.apply(namespace())
    yield backend
    backend.close()


def only_pod(server):
    (pod,) = server.objects("Pod", NS)
    return pod["metadata"]["name"]


def test_kubernetes_pod_events_are_the_pods_own_and_limited(server, kube):
    kube.apply(batch_job("a"))
    kube.apply(batch_job("b"))
    pod_a, pod_b = (p["metadata"]["name"] for p in server.objects("Pod", NS))
    server.set_pod_phase(NS, pod_a, "Running")
    events = kube.pod_events(NS, pod_a)
    assert {e["reason"] for e in events} == {"Scheduled", "Pulled", "Created", "Started"}
    assert {e["involvedObject"]["name"] for e in events} == {pod_a}
    assert len(kube.pod_events(NS, pod_a, limit=2)) == 2
    assert [e["reason"] for e in kube.pod_events(NS, pod_b)] == ["Scheduled"]
    assert kube.pod_events(NS, "nobody") == []


def test_kubernetes_pod_log_tails_and_maps_the_servers_refusals(server, kube):
    kube.apply(batch_job(containers=("main", "sidecar")))
    pod = only_pod(server)
    with pytest.raises(PermanentBackendError) as waiting:
        kube.pod_log(NS, pod, container="main")
    assert waiting.value.status == 400 and "is waiting to start: ContainerCreating" in waiting.value.message
    server.set_pod_phase(NS, pod, "Running")
    server.set_pod_log(NS, pod, "".join(f"步骤 {i}\n" for i in range(10)), container="main")
    assert kube.pod_log(NS, pod, container="main", tail_lines=2) == "步骤 8\n步骤 9\n"
    # limitBytes may cut a character in two: decoded with a replacement character, never an error.
    cut = kube.pod_log(NS, pod, container="main", tail_lines=1, limit_bytes=4)
    assert cut.startswith("步") and cut.endswith("\ufffd")
    with pytest.raises(PermanentBackendError) as several:
        kube.pod_log(NS, pod)
    assert several.value.status == 400 and "choose one of: [main sidecar]" in several.value.message
    with pytest.raises(PermanentBackendError) as missing:
        kube.pod_log(NS, "ghost")
    assert missing.value.status == 404


# -- simulated --------------------------------------------------------------------------------------


@pytest.fixture
def sim():
    backend = FaithfulSimulatedBackend(seed=3)
    backend.apply(namespace())
    return backend


def test_simulated_events_follow_the_pods_lifecycle_and_are_marked(sim):
    sim.apply(batch_job(duration=600))
    (pod,) = sim.pods_of(NS, "train-1")
    name = pod["metadata"]["name"]
    before = sim.pod_events(NS, name)
    assert [e["reason"] for e in before] == ["Scheduled"]
    assert before[0]["message"] == f"Successfully assigned {NS}/{name} to gpu-1"
    sim.advance(30)
    after = sim.pod_events(NS, name)
    assert [e["reason"] for e in after] == ["Scheduled", "Pulled", "Created", "Started"]
    assert {e["source"]["component"] for e in after} == {"suanchi-simulator"}
    sim.delete("Job", NS, "train-1")  # a graceful stop of the running container
    assert [e["reason"] for e in sim.pod_events(NS, name)][-1] == "Killing"
    assert sim.pod_events(NS, "nobody") == []


def test_simulated_log_lines_come_from_the_time_the_container_ran(sim):
    sim.apply(batch_job(duration=120))
    (pod,) = sim.pods_of(NS, "train-1")
    name = pod["metadata"]["name"]
    with pytest.raises(PermanentBackendError) as waiting:
        sim.pod_log(NS, name)
    assert waiting.value.status == 400 and "is waiting to start" in waiting.value.message
    sim.advance(65)
    lines = sim.pod_log(NS, name).splitlines()
    assert 5 <= len(lines) <= 6 and all("[simulated] main: step" in line for line in lines)
    assert sim.pod_log(NS, name) == "\n".join(lines) + "\n"  # reproducible between reads
    assert sim.pod_log(NS, name, tail_lines=2).splitlines() == lines[-2:]
    assert len(sim.pod_log(NS, name, limit_bytes=10).encode()) == 10
    sim.advance(600)  # past its duration: the pod succeeded
    done = sim.pod_log(NS, name).splitlines()
    assert done[-1].endswith("exited with code 0 (Completed)")
    (ended,) = sim.pods_of(NS, "train-1")
    terminated = ended["status"]["containerStatuses"][0]["state"]["terminated"]
    ran = sim._instant(terminated["finishedAt"]) - sim._instant(terminated["startedAt"])
    assert len(done) == int(ran.total_seconds()) // 10 + 1  # a line per 10 s it ran, then the exit
    assert sim.pod_log(NS, name, tail_lines=1) == done[-1] + "\n"
    with pytest.raises(PermanentBackendError) as missing:
        sim.pod_log(NS, "ghost")
    assert missing.value.status == 404
    with pytest.raises(PermanentBackendError) as previous:
        sim.pod_log(NS, name, previous=True)
    assert previous.value.status == 400


def test_simulated_pod_with_several_containers_needs_the_container_named():
    sim = SimulatedBackend(seed=1)
    sim.apply(namespace())
    sim.apply(batch_job(containers=("main", "sidecar")))
    sim.advance(30)
    (pod,) = sim.pods_of(NS, "train-1")
    with pytest.raises(PermanentBackendError) as several:
        sim.pod_log(NS, pod["metadata"]["name"])
    assert "choose one of: [main sidecar]" in several.value.message
    assert "sidecar: step 1 " in sim.pod_log(NS, pod["metadata"]["name"], container="sidecar")
