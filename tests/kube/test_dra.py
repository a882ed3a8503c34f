"""Device-plugin modes end to end: the demo rendered in plain and DRA mode (kubernetes-validate
strict, 1.34 and 1.30 where the kind exists), and a DRA job on the fake Kubernetes API server
through the official client — its claim allocated by the fake's allocator to exactly the card the
ledger chose."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
import yaml
from django.core.management import call_command
from kubernetes_validate.utils import resources_from_file

from apps.clusters import manifests as m
from apps.clusters.connections import backend_for
from apps.inventory.models import Cluster, Node
from apps.jobs.models import ACTIVE_STATES, Allocation, JobState
from apps.scheduling.push import push_job_run
from apps.scheduling.reconcile import reconcile_cluster
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.kube.fake_apiserver import dra_sample, kubeconfig_for
from tests.kube.validation import assert_strict_valid

pytestmark = pytest.mark.django_db


UUID_TERM = re.compile(
    r'device\.attributes\["gpu\.nvidia\.com"\]\.(?:uuid|parentUUID) (?:==|in) (.+?)(?: &&|$)'
)


def render(out) -> list[dict]:
    call_command("render_manifests", "--all", "--out", str(out))
    objects = []
    for path in sorted(out.iterdir()):
        objects.extend(resources_from_file(str(path)))
    return objects


def pod_templates(objects):
    return [o["spec"]["template"] for o in objects if o["kind"] in m.WORKLOAD_KINDS]


def validate(obj):
    assert_strict_valid(obj)


def test_demo_renders_exact_requests_in_plain_and_dra_mode(tmp_path, capsys):
    call_command("load_demo")
    capsys.readouterr()
    active = list(
        Allocation.objects.filter(released_at__isnull=True, job__state__in=ACTIVE_STATES).select_related(
            "device", "node__cluster", "job"
        )
    )
    assert any(a.device.vendor == "nvidia" for a in active), "the demo places NVIDIA work"
    assert len({a.device.vendor for a in active}) > 1

    # -- every vendor plain ------------------------------------------------------------------------
    Cluster.objects.update(device_plugin_modes={})
    plain = render(tmp_path / "plain")
    templates = pod_templates(plain)
    assert len(templates) >= len({a.job_id for a in active})
    for obj in plain:
        validate(obj)
    for template in templates:
        spec = template["spec"]
        env = {e["name"] for c in spec["containers"] for e in c.get("env", [])}
        assert not env & m.DEVICE_PLUGIN_ENV, env & m.DEVICE_PLUGIN_ENV
        assert not any(name.endswith("VISIBLE_DEVICES") for name in env)
        # No template can land on more than one node: pinned to exactly one hostname.
        assert list(spec["nodeSelector"]) == [m.HOSTNAME_LABEL]
        assert "affinity" not in spec and "nodeName" not in spec
        assert "resourceClaims" not in spec

    # -- NVIDIA switched to DRA --------------------------------------------------------------------
    for cluster in Cluster.objects.all():
        cluster.device_plugin_modes = {"nvidia": "dra"}
        cluster.save(update_fields=["device_plugin_modes"])
    dra = render(tmp_path / "dra")
    for obj in dra:
        validate(obj)
    kinds = {o["kind"] for o in dra}
    assert {"DeviceClass", "ResourceClaim"} <= kinds
    selected: dict[str, set[str]] = defaultdict(set)  # job id -> UUIDs its claims select
    for obj in dra:
        if obj["kind"] not in ("ResourceClaim", "ResourceClaimTemplate"):
            continue
        spec = obj["spec"] if obj["kind"] == "ResourceClaim" else obj["spec"]["spec"]
        for request in spec["devices"]["requests"]:
            assert request["exactly"]["deviceClassName"] in {"gpu.nvidia.com", "mig.nvidia.com"}
            for selector in request["exactly"].get("selectors", []):
                for literal in UUID_TERM.findall(selector["cel"]["expression"]):
                    selected[obj["metadata"]["labels"][m.LABEL_JOB]].update(re.findall(r'"([^"]+)"', literal))
    nvidia = [a for a in active if a.device.vendor == "nvidia"]
    for a in nvidia:
        assert a.device.uuid in selected[str(a.job_id)], (a.job_id, a.device.uuid)
    # Pods holding NVIDIA cards (a mixed GPU + NPU job placed across nodes also has an NPU-only pod).
    nvidia_pods = {(str(a.job_id), a.node.name) for a in nvidia}
    for obj in dra:
        if obj["kind"] not in m.WORKLOAD_KINDS:
            continue
        spec = obj["spec"]["template"]["spec"]
        pod = (obj["metadata"]["labels"][m.LABEL_JOB], spec["nodeSelector"][m.HOSTNAME_LABEL])
        if pod not in nvidia_pods:
            continue
        claims = spec["resourceClaims"]
        assert [c["name"] for c in claims] == [m.POD_CLAIM_NAME]
        for container in spec["containers"]:
            assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
            assert container["resources"]["claims"] == [{"name": m.POD_CLAIM_NAME}]
        assert list(spec["nodeSelector"]) == [m.HOSTNAME_LABEL]
    # Every claim a pod names is rendered.
    claim_names = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in dra if "Claim" in o["kind"]}
    for obj in dra:
        if obj["kind"] in m.WORKLOAD_KINDS:
            for ref in obj["spec"]["template"]["spec"].get("resourceClaims", []):
                name = ref.get("resourceClaimName") or ref.get("resourceClaimTemplateName")
                assert (obj["metadata"]["namespace"], name) in claim_names


# ---------------------------------------------------------------------------------------------------
# On the fake API server through the official client
# ---------------------------------------------------------------------------------------------------


def nvidia_gpu_device(name: str, uuid: str) -> dict:
    (device,) = dra_sample("nvidia-gpu-resourceslice")["spec"]["devices"]
    device["name"], device["attributes"]["uuid"] = name, {"string": uuid}
    return device


@pytest.fixture
def dra_cluster(fleet, server, tmp_path):
    cluster = Cluster.objects.get(slug="prod")
    cluster.backend = Cluster.Backend.KUBERNETES
    cluster.kubeconfig_path = str(kubeconfig_for(server, tmp_path))
    cluster.device_plugin_modes = {"nvidia": "dra"}
    cluster.save()
    for name, node in fleet.items():
        server.add_node(name)
        if node.devices.filter(vendor="nvidia").exists():
            # NVIDIA's kubelet plugin's real GPU device (fixtures/dra/nvidia-gpu-resourceslice.yaml),
            # one per card of the ledger with its UUID.
            server.add_resource_slice(
                f"{name}-gpu.nvidia.com",
                name,
                "gpu.nvidia.com",
                [nvidia_gpu_device(f"gpu-{i}", d.uuid) for i, d in enumerate(node.devices.order_by("index"))],
            )
    backend = backend_for(cluster)
    try:  # the DeviceClasses of platform/kubernetes/dra, applied like any object
        for obj in m.device_class_manifests():
            assert backend.apply(obj).action in ("created", "unchanged")
    finally:
        backend.close()
    return cluster


def test_a_dra_job_gets_exactly_the_cards_the_ledger_chose(dra_cluster, server, member_project, a100):
    user, project = member_project
    # Something on the first cards, so the ledger's choice is not simply "the first free devices".
    blocker = submit_whole_cards(project, user, a100, 1, name="blocker", image="x:1")
    job = submit_whole_cards(
        project, user, a100, 2, name="train", image="pytorch:2.3", expected_duration_s=600
    )
    result = scheduling_cycle_run()
    assert {blocker.pk, job.pk} <= set(result.placed_job_ids)
    for j in (blocker, job):
        assert push_job_run(job_id=j.pk)["failed"] == 0
    job.refresh_from_db()
    chosen = sorted(
        Allocation.objects.filter(job=job, released_at__isnull=True).values_list("device__uuid", flat=True)
    )
    (node_name,) = set(Allocation.objects.filter(job=job).values_list("node__name", flat=True))

    server.advance(0)  # the scheduler's DynamicResources plugin allocates the claims and binds
    (claim,) = [
        c for c in server.objects("ResourceClaim") if c["metadata"]["name"] == f"suanchi-{job.pk}-a0-devices"
    ]
    results = claim["status"]["allocation"]["devices"]["results"]
    (slice_,) = [s for s in server.objects("ResourceSlice") if s["spec"]["nodeName"] == node_name]
    uuid_of = {d["name"]: d["attributes"]["uuid"]["string"] for d in slice_["spec"]["devices"]}
    assert sorted(uuid_of[r["device"]] for r in results) == chosen
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}

    (pod,) = [
        p for p in server.objects("Pod") if p["metadata"]["labels"].get("job-name") == f"suanchi-{job.pk}-a0"
    ]
    assert pod["spec"]["nodeName"] == node_name
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})
    server.set_pod_phase(pod["metadata"]["namespace"], pod["metadata"]["name"], "Running")
    assert reconcile_cluster(cluster=dra_cluster).running >= 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_hami_mode_keeps_the_uuid_annotation_as_the_binding(fleet, member_project, a100, tmp_path):
    user, project = member_project
    Cluster.objects.filter(slug="prod").update(device_plugin_modes={"nvidia": "hami"})
    job = submit_whole_cards(project, user, a100, 2, name="share", image="x:1")
    assert job.pk in scheduling_cycle_run().placed_job_ids
    call_command("render_manifests", "--job", str(job.pk), "--out", str(tmp_path))
    (path,) = [p for p in tmp_path.iterdir() if p.name.startswith("job-")]
    obj = yaml.safe_load(path.read_text())
    validate(obj)
    pod = obj["spec"]["template"]
    uuids = sorted(
        Allocation.objects.filter(job=job, released_at__isnull=True).values_list("device__uuid", flat=True)
    )
    assert sorted(pod["metadata"]["annotations"][m.HAMI_UUID_ANNOTATION].split(",")) == uuids
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert Node.objects.filter(name=pod["spec"]["nodeSelector"][m.HOSTNAME_LABEL]).exists()
