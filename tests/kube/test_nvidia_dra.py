"""NVIDIA DRA driver details checked against the driver's own chart (NVIDIA/k8s-dra-driver-gpu @
22407113785e78c7763b4637689a201eb39c6199, deployments/helm/dra-driver-nvidia-gpu/templates/)."""

from __future__ import annotations

import copy
from decimal import Decimal

import kubernetes_validate
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apps.catalog.models import ComputeTemplate
from apps.clusters import manifests as m
from apps.clusters import sharing
from apps.clusters.connect import cluster_connection_test, feature_gates_parse, nvidia_dra_gates
from apps.clusters.connections import backend_for
from apps.clusters.sync import cluster_sync, slices_parse
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.jobs.models import Allocation
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.push import push_job_run
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures import jobs as jobs_fixtures
from tests.kube.fake_apiserver import dra_sample, kubeconfig_for
from tests.kube.test_manifests import allocs, make_job
from tests.kube.validation import assert_strict_valid

pytestmark = pytest.mark.django_db


def test_device_classes_carry_the_extended_resource_name_the_chart_sets():
    classes = {c["metadata"]["name"]: c for c in m.device_class_manifests()}
    # deviceclass-gpu.yaml: `extendedResourceName: nvidia.com/gpu` when rendering resource.k8s.io/v1.
    assert classes["gpu.nvidia.com"]["apiVersion"] == "resource.k8s.io/v1"
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    # deviceclass-mig.yaml sets none; AMD's copy carries none either.
    assert "extendedResourceName" not in classes["mig.nvidia.com"]["spec"]
    assert "extendedResourceName" not in classes["gpu.amd.com"]["spec"]
    for obj in classes.values():
        for version in ("1.34.0", "1.35.0", "1.36.0"):
            kubernetes_validate.validate(obj, version, strict=True)


# ---------------------------------------------------------------------------------------------------
# MIG devices by their own uuid, cluster sync on a MIG-enabled node, pool generations, sharing gates
# (driver source: sigs.k8s.io/dra-driver-nvidia-gpu, formerly NVIDIA/k8s-dra-driver-gpu, at the commit
# above; where a behaviour is only read in that source, not run, the test says so).


NVIDIA = "gpu.nvidia.com"
MIG_NODE = "aks-migpool-68842551-vmss000001"  # the real MIG slice's node (fixtures/dra)
# The second MIG UUID of the `nvidia-smi -L` output quoted in the driver's
# demo/specs/extended-resources/mig-1g-12gb.yaml (the first is the fixture's).
SECOND_MIG_UUID = "MIG-8949ea7d-9166-53ce-9bac-6c58262addf9"


@pytest.fixture(autouse=True)
def secrets_dir(settings, tmp_path):
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path)}


def mig_device(profile: str, gi_profile_id: int, start: int, size: int, uuid: str) -> dict:
    """The fixture's real MIG device as the driver publishes another instance: the name by
    cmd/gpu-kubelet-plugin/mig.go ToCanonicalName (gpu-<minor>-mig-<profile without dots>-<GI
    profile id>-<placement start>), ``profile`` / ``uuid``, and one ``memorySlice<i>`` capacity per
    memory slice of the placement (deviceinfo.go MigDeviceInfo.GetDevice)."""
    (device,) = dra_sample("nvidia-mig-node-resourceslice")["spec"]["devices"]
    device = copy.deepcopy(device)
    device["name"] = f"gpu-2-mig-{profile.replace('.', '')}-{gi_profile_id}-{start}"
    device["attributes"]["profile"] = {"string": profile}
    device["attributes"]["uuid"] = {"string": uuid}
    device["capacity"] = {f"memorySlice{i}": {"value": "1"} for i in range(start, start + size)}
    return device


def mig_slice(devices: list[dict], generation: int = 1, server=None) -> dict:
    """The real MIG node's slice holding ``devices``; owned (as the driver's are) by its Node, whose
    uid on ``server`` replaces the sample's (else the garbage collector removes the slice)."""
    obj = dra_sample("nvidia-mig-node-resourceslice")
    if server is not None:
        (node,) = [n for n in server.objects("Node") if n["metadata"]["name"] == MIG_NODE]
        obj["metadata"]["ownerReferences"][0]["uid"] = node["metadata"]["uid"]
    obj["metadata"]["name"] = f"{MIG_NODE}-gpu.nvidia.com-g{generation}"
    obj["spec"]["devices"] = devices
    obj["spec"]["pool"]["generation"] = generation
    return obj


def parent_uuid() -> str:
    (device,) = dra_sample("nvidia-mig-node-resourceslice")["spec"]["devices"]
    return device["attributes"]["parentUUID"]["string"]


def cluster_on(server, tmp_path, modes: dict, last_check: dict | None = None) -> Cluster:
    cluster = Cluster.objects.create(
        name="Prod",
        slug="prod",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(kubeconfig_for(server, tmp_path)),
        device_plugin_modes=modes,
        last_check=last_check or {},
    )
    Pool.objects.create(cluster=cluster, name="training", slug="training")
    return cluster


def ledger_card(cluster: Cluster, node_name: str, uuid: str, model=None, **fields) -> Device:
    node = Node.objects.create(cluster=cluster, pool=cluster.pools.get(slug="training"), name=node_name)
    return Device.objects.create(node=node, index=0, vendor="nvidia", uuid=uuid, device_model=model, **fields)


def device_drift(report) -> list[dict]:
    return [d for d in report.drift if d["drift"].startswith(("slice-device:", "ledger-device:"))]


# A100 80GB: GI profile 3g.40gb is id 9 with placements {0, 4} of size 4 (the catalog's geometry,
# apps/catalog/data/mig-geometry.yaml, from nvidia-smi mig -lgipp).
THREE_G = [
    mig_device("3g.40gb", 9, 0, 4, "MIG-4d806f22-346a-5a1d-ac01-86b505cdf485"),
    mig_device("3g.40gb", 9, 4, 4, SECOND_MIG_UUID),
]


def test_the_mig_fixture_carries_the_mig_devices_own_uuid_profile_and_memory_slices():
    (device,) = slices_parse([dra_sample("nvidia-mig-node-resourceslice")])
    assert device.uuid == "MIG-4d806f22-346a-5a1d-ac01-86b505cdf485"
    assert device.parent_uuid == parent_uuid()
    assert device.mig_record() == {
        "uuid": "MIG-4d806f22-346a-5a1d-ac01-86b505cdf485",
        "profile": "1g.24gb",
        "start": 0,
        "size": 1,
        "device": "gpu-2-mig-1g24gb-19-0",
    }
    # a whole GPU is no MIG device
    (gpu,) = slices_parse([dra_sample("nvidia-gpu-resourceslice")])
    assert gpu.mig_record() is None


def test_sync_on_a_mig_enabled_node_learns_the_instances_and_reports_no_drift(server, tmp_path):
    cluster = cluster_on(server, tmp_path, {"nvidia": "dra"})
    card = ledger_card(cluster, MIG_NODE, parent_uuid(), mig_enabled=True)
    server.add_node(MIG_NODE)
    server.publish_resource_slice(mig_slice(THREE_G))

    report = cluster_sync(cluster=cluster)

    # the parent card is absent from the slice, its MIG devices present: neither is drift
    assert device_drift(report) == []
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).exists()
    card.refresh_from_db()
    assert [(m["profile"], m["start"], m["size"], m["uuid"]) for m in card.dra_mig_devices] == [
        ("3g.40gb", 0, 4, THREE_G[0]["attributes"]["uuid"]["string"]),
        ("3g.40gb", 4, 4, SECOND_MIG_UUID),
    ]
    learned = DeviceEvent.objects.filter(device=card, kind=DeviceEvent.Kind.UPDATED).count()
    assert learned == 1
    # idempotent: a second pass learns nothing new
    report = cluster_sync(cluster=cluster)
    assert device_drift(report) == []
    assert DeviceEvent.objects.filter(device=card, kind=DeviceEvent.Kind.UPDATED).count() == learned
    # the MIG uuid never becomes the card's uuid
    card.refresh_from_db()
    assert card.uuid == parent_uuid()


def test_only_the_newest_pool_generation_counts_for_mig_devices(server, tmp_path):
    """The driver restarted with a new MIG layout: generation 1 (two 3g instances) still lingers,
    generation 2 publishes one 7g instance (ResourcePool.generation: consumers only consider the
    highest generation of a pool)."""
    cluster = cluster_on(server, tmp_path, {"nvidia": "dra"})
    card = ledger_card(cluster, MIG_NODE, parent_uuid(), mig_enabled=True)
    server.add_node(MIG_NODE)
    server.publish_resource_slice(mig_slice(THREE_G, generation=1))
    seven = mig_device("7g.80gb", 0, 0, 8, "MIG-48e730aa-3a45-5cf9-b1f3-07d2916e9d83")
    server.publish_resource_slice(mig_slice([seven], generation=2))
    assert len(server.objects("ResourceSlice")) == 2

    report = cluster_sync(cluster=cluster)

    assert device_drift(report) == []
    card.refresh_from_db()
    assert [(m["profile"], m["start"]) for m in card.dra_mig_devices] == [("7g.80gb", 0)]
    assert {s["device"] for s in report.slices} == {seven["name"]}


def test_a_mig_device_of_an_unknown_parent_is_still_drift(server, tmp_path):
    cluster = cluster_on(server, tmp_path, {"nvidia": "dra"})
    card = ledger_card(cluster, MIG_NODE, "GPU-someone-else", mig_enabled=True)
    server.add_node(MIG_NODE)
    server.publish_resource_slice(mig_slice(THREE_G))
    report = cluster_sync(cluster=cluster)
    assert sorted(d["drift"].split(":")[0] for d in device_drift(report)) == [
        "ledger-device",
        "slice-device",
        "slice-device",
    ]
    card.refresh_from_db()
    assert card.dra_mig_devices == []


@pytest.fixture
def mig_3g(a100):
    return ComputeTemplate.objects.create(
        device_model=a100,
        name="A100 MIG 3g.40gb",
        slug="a100-mig-3g",
        memory_mib=40960,
        compute_share=Decimal("42.86"),
        isolation="hard",
        partition_profile="3g.40gb",
        max_instances=2,
    )


def test_two_instances_of_a_profile_on_one_card_the_pod_gets_the_ledgers_instance(
    server, tmp_path, a100, mig_3g, member_project
):
    cluster = cluster_on(server, tmp_path, {"nvidia": "dra"})
    card = ledger_card(cluster, MIG_NODE, parent_uuid(), a100, mig_enabled=True)
    server.add_node(MIG_NODE)
    server.publish_resource_slice(mig_slice(THREE_G, server=server))
    assert device_drift(cluster_sync(cluster=cluster)) == []
    backend = backend_for(cluster)
    try:
        for obj in m.device_class_manifests():
            assert backend.apply(obj).action in ("created", "unchanged")
    finally:
        backend.close()
    user, project = member_project
    jobs = [
        job_submit(
            project=project, actor=user, name=name, image="x:1", request_kind="template", template=mig_3g
        )
        for name in ("first", "second")
    ]
    assert set(scheduling_cycle_run().placed_job_ids) == {j.pk for j in jobs}
    starts = dict(Allocation.objects.filter(device=card).values_list("job_id", "mig_start"))
    assert sorted(starts.values()) == [0, 4]
    # Only the job on start 4 is pushed: the allocator's first free 3g.40gb device is start 0, so a
    # selector by parentUUID + profile would give the pod the other instance than the ledger's.
    job = next(j for j in jobs if starts[j.pk] == 4)
    assert push_job_run(job_id=job.pk)["failed"] == 0
    (claim,) = [
        c for c in server.objects("ResourceClaim") if c["metadata"]["name"].startswith(f"suanchi-{job.pk}-")
    ]
    assert_strict_valid(claim)
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    (selector,) = request["exactly"]["selectors"]
    assert selector["cel"]["expression"] == f'device.attributes["{NVIDIA}"].uuid == "{SECOND_MIG_UUID}"'

    server.advance(0)
    claim = next(
        c for c in server.objects("ResourceClaim") if c["metadata"]["name"] == claim["metadata"]["name"]
    )
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (NVIDIA, MIG_NODE, THREE_G[1]["name"])


def test_without_a_learned_instance_the_claim_falls_back_to_parent_and_profile():
    (a,) = allocs("nvidia", ["node-01"], 1)
    a.whole_card = False
    a.partition_profile = "3g.40gb"
    a.mig_start = 4
    a.device.dra_mig_devices = [{"uuid": "MIG-x", "profile": "3g.40gb", "start": 0, "size": 4}]
    assert m.mig_device_uuid(a) == ""  # the ledger's start 4 is not published: no guess
    a.device.dra_mig_devices.append({"uuid": "MIG-y", "profile": "3g.40gb", "start": 4, "size": 4})
    assert m.mig_device_uuid(a) == "MIG-y"
    a.mig_start = None
    assert m.mig_device_uuid(a) == ""  # two instances, no start: unknown which
    a.device.dra_mig_devices = a.device.dra_mig_devices[:1]
    assert m.mig_device_uuid(a) == "MIG-x"  # the card's only instance of the profile


# -- the driver's sharing feature gates --------------------------------------------------------------


def kubelet_plugin_daemonset(
    env: list[dict] | None, name: str = "dra-driver-nvidia-gpu-kubelet-plugin"
) -> dict:
    """The DaemonSet templates/kubeletplugin.yaml renders (metadata.name "<chart>-kubelet-plugin", the
    containers compute-domains and gpus, FEATURE_GATES from the Helm value featureGates: Helm's
    ``range`` over a map goes in key order, each pair followed by a comma), trimmed to what matters."""
    labels = {"app.kubernetes.io/name": "dra-driver-nvidia-gpu"}
    containers = [{"name": "compute-domains", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"}]
    gpus = {"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"}
    if env is not None:
        gpus["env"] = env
        containers[0]["env"] = env
    containers.append(gpus)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "nvidia-dra-driver-gpu"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}},
        },
    }


@pytest.mark.parametrize(
    ("text", "gates"),
    [
        ("MPSSupport=true,TimeSlicingSettings=false,", {"MPSSupport": True, "TimeSlicingSettings": False}),
        (" TimeSlicingSettings=True , ", {"TimeSlicingSettings": True}),
        ("", {}),
        ("TimeSlicingSettings", None),
        ("TimeSlicingSettings=yes", None),  # strconv.ParseBool refuses it: the driver would not start
    ],
)
def test_feature_gates_are_parsed_as_the_flag_does(text, gates):
    assert feature_gates_parse(text) == gates


def test_gates_default_to_the_drivers_defaults_and_a_configmap_value_is_unknown():
    assert nvidia_dra_gates(kubelet_plugin_daemonset(None)) == {
        "TimeSlicingSettings": False,
        "MPSSupport": False,
        "DynamicMIG": False,
    }
    env = [{"name": "FEATURE_GATES", "value": "TimeSlicingSettings=true,"}]
    assert nvidia_dra_gates(kubelet_plugin_daemonset(env))["TimeSlicingSettings"] is True
    from_cm = [{"name": "FEATURE_GATES", "valueFrom": {"configMapKeyRef": {"name": "g", "key": "k"}}}]
    assert nvidia_dra_gates(kubelet_plugin_daemonset(from_cm)) is None


def test_test_connection_records_the_sharing_gates_and_shows_them_with_the_plugins(server, tmp_path):
    cluster = cluster_on(server, tmp_path, {"nvidia": "dra"})
    api = k8s_config.new_client_from_config(config_file=cluster.kubeconfig_path)
    try:
        k8s.CoreV1Api(api).create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nvidia-dra-driver-gpu"}}
        )
        env = [{"name": "FEATURE_GATES", "value": "MPSSupport=false,TimeSlicingSettings=true,"}]
        k8s.AppsV1Api(api).create_namespaced_daemon_set(
            "nvidia-dra-driver-gpu", kubelet_plugin_daemonset(env)
        )
    finally:
        api.close()

    result = cluster_connection_test(cluster=cluster, actor="t")

    (plugin,) = [p for p in result["plugins"] if p["what"] == "NVIDIA DRA driver"]
    assert plugin["daemonset"] == "nvidia-dra-driver-gpu/dra-driver-nvidia-gpu-kubelet-plugin"
    assert plugin["feature_gates"] == {"TimeSlicingSettings": True, "MPSSupport": False, "DynamicMIG": False}
    text = " ".join(result["lines"])
    assert "Its feature gates: DynamicMIG=false, MPSSupport=false, TimeSlicingSettings=true." in text
    cluster.refresh_from_db()
    assert cluster.last_check["dra_gates"]["nvidia"]["gates"]["TimeSlicingSettings"] is True


GATES_OFF = {
    "dra_gates": {
        "nvidia": {
            "daemonset": "nvidia-dra-driver-gpu/dra-driver-nvidia-gpu-kubelet-plugin",
            "gates": {"TimeSlicingSettings": False, "MPSSupport": False, "DynamicMIG": False},
        }
    }
}


def gates(**on) -> dict:
    check = copy.deepcopy(GATES_OFF)
    check["dra_gates"]["nvidia"]["gates"].update(on)
    return check


def test_a_fraction_through_dra_with_its_gate_off_is_not_rendered():
    fraction = allocs("nvidia", ["node-01"], 1, memory=20480, milli=500)
    fraction[0].whole_card = False
    cluster = Cluster(device_plugin_modes={"nvidia": "dra"}, last_check=GATES_OFF)
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(make_job(), fraction, cluster, attempt=0)
    assert err.value.code == "fraction_not_shareable"
    assert "MPSSupport" in err.value.message and "whole cards or a MIG profile" in err.value.message
    # With the gate on the fraction is rendered through the driver's GpuConfig (MPS for hard isolation).
    cluster.last_check = gates(MPSSupport=True)
    objects = m.job_manifest(make_job(), fraction, cluster, attempt=0)
    assert_strict_valid(objects)
    # never recorded: unknown is no refusal (the driver may have the gate on)
    assert sharing.dra_gate_refusal("nvidia", "dra", "hard", Cluster()) == ""


def test_the_refusal_names_the_other_strategy_when_its_gate_is_on():
    text = sharing.dra_gate_refusal(
        "nvidia", "dra", "hard", Cluster(last_check=gates(TimeSlicingSettings=True))
    )
    assert "MPSSupport" in text and "shared isolation: TimeSlicing is enabled" in text
    assert (
        sharing.dra_gate_refusal(
            "nvidia", "dra", "shared", Cluster(last_check=gates(TimeSlicingSettings=True))
        )
        == ""
    )
    # MPS is refused together with DynamicMIG (pkg/featuregates: mutually exclusive): not offered
    text = sharing.dra_gate_refusal(
        "nvidia", "dra", "shared", Cluster(last_check=gates(MPSSupport=True, DynamicMIG=True))
    )
    assert "TimeSlicingSettings" in text and "MPS is enabled" not in text


@pytest.fixture
def half_card(a100):
    return ComputeTemplate.objects.create(
        device_model=a100,
        name="A100 half, time-sliced",
        slug="a100-half-shared",
        memory_mib=40960,
        compute_share=Decimal("50"),
        isolation="shared",
        max_instances=2,
    )


def dra_fleet(a100, last_check: dict) -> Cluster:
    cluster = Cluster.objects.create(
        name="Prod", slug="prod", device_plugin_modes={"nvidia": "dra"}, last_check=last_check
    )
    Pool.objects.create(cluster=cluster, name="training", slug="training")
    ledger_card(cluster, "gpu-01", "GPU-13719f71-412c-d11e-b236-a262f530a4fc", a100)
    return cluster


def test_a_fraction_submit_is_refused_where_the_drivers_gate_is_off(a100, half_card, member_project):
    dra_fleet(a100, GATES_OFF)
    user, project = member_project
    with pytest.raises(ValidationFailed) as err:
        job_submit(
            project=project, actor=user, name="half", image="x:1", request_kind="template", template=half_card
        )
    message = err.value.message
    assert "TimeSlicingSettings feature gate is off" in message
    assert "featureGates.TimeSlicingSettings=true" in message and "whole cards or a MIG profile" in message
    # whole cards on the same cluster are still accepted
    job = jobs_fixtures.submit_whole_cards(project, user, a100, 1, name="whole", image="x:1")
    assert job.pk is not None


def test_a_fraction_submit_is_accepted_once_the_gate_is_on(a100, half_card, member_project):
    dra_fleet(a100, gates(TimeSlicingSettings=True))
    user, project = member_project
    job = job_submit(
        project=project, actor=user, name="half", image="x:1", request_kind="template", template=half_card
    )
    assert job.pk is not None


# -- the fake models the driver refusing a claim (read from the driver's source, not run) -------------


def claim_and_pod(fake_core, dra, name: str, sharing_cfg: dict | None) -> None:
    uuid = "GPU-13719f71-412c-d11e-b236-a262f530a4fc"
    devices = {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "selectors": [{"cel": {"expression": f'device.attributes["{NVIDIA}"].uuid == "{uuid}"'}}],
                },
            }
        ]
    }
    if sharing_cfg is not None:
        params = {"apiVersion": m.NVIDIA_CONFIG_API, "kind": "GpuConfig", "sharing": sharing_cfg}
        devices["config"] = [{"requests": ["gpu"], "opaque": {"driver": NVIDIA, "parameters": params}}]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}}
    dra.create_namespaced_resource_claim("p", {**claim, "spec": {"devices": devices}})
    fake_core.create_namespaced_pod(
        "p",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [{"name": "main", "image": "x:1", "resources": {"claims": [{"name": "gpu"}]}}],
            },
        },
    )


@pytest.mark.parametrize(
    ("told", "cfg", "refused"),
    [
        (None, {"strategy": "TimeSlicing"}, None),  # the knob unset: not modelled
        ({"TimeSlicingSettings": False}, {"strategy": "TimeSlicing"}, ("TimeSlicing", "TimeSlicingSettings")),
        ({"TimeSlicingSettings": True}, {"strategy": "TimeSlicing"}, None),
        ({"MPSSupport": False}, {"strategy": "MPS"}, ("MPS", "MPSSupport")),
        ({"MPSSupport": True}, {"strategy": "MPS"}, None),
        ({}, None, None),  # no sharing config: valid with every gate off (gpuconfig.go Validate)
    ],
)
def test_the_fake_driver_refuses_a_sharing_config_whose_gate_is_off(
    fake_server, fake_api, fake_core, told, cfg, refused
):
    fake_server.nvidia_dra_feature_gates = told
    fake_server.add_node("gpu-01")
    gpu = dra_sample("nvidia-gpu-resourceslice")
    gpu["spec"]["nodeName"] = gpu["spec"]["pool"]["name"] = "gpu-01"
    fake_server.publish_resource_slice(gpu)
    dra = k8s.ResourceV1Api(fake_api)
    for obj in m.device_class_manifests():
        dra.create_device_class(obj)
    fake_core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "p"}})
    claim_and_pod(fake_core, dra, "shared", cfg)
    fake_server.advance(0)

    pod = fake_core.read_namespaced_pod("shared", "p")
    assert pod.spec.node_name == "gpu-01"  # scheduled either way: the driver refuses on the node
    events = [
        e for e in fake_core.list_namespaced_event("p").items if e.reason == "FailedPrepareDynamicResources"
    ]
    if refused is None:
        assert events == []
        assert fake_server.set_pod_phase("p", "shared", "Running")["status"]["phase"] == "Running"
        return
    strategy, gate = refused
    (event,) = events
    claim_uid = dra.read_namespaced_resource_claim("shared", "p").metadata.uid
    assert event.source.component == "kubelet" and event.type == "Warning"
    assert event.message == (
        "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for "
        f"ResourceClaim shared: error preparing devices for claim p/shared:{claim_uid}: prepare devices "
        f'failed: error validating GPU config: "{strategy}" is selected as the GPU sharing strategy, but '
        f'the "{gate}" feature gate is not enabled'
    )
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    with pytest.raises(RuntimeError):
        fake_server.set_pod_phase("p", "shared", "Running")
