"""DRA against the drivers' own ResourceSlices (fixtures/dra, sources in fixtures/dra/SOURCES.md):
an AMD claim rendered for a card whose PCI address has hex letters is allocated exactly that card by
the fake's allocator; cluster sync finds AMD cards (no UUID, matched by PCI address), MIG devices of
an NVIDIA MIG-enabled node (whose parent GPU is not published) and ignores stale pool generations."""

from __future__ import annotations

import copy
from datetime import date
from decimal import Decimal

import pytest
from kubernetes import client as k8s

from apps.catalog.models import ComputeCoefficient, DeviceModel
from apps.clusters import manifests as m
from apps.clusters.connections import backend_for
from apps.clusters.sync import cluster_sync, slices_parse
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.jobs.models import Allocation
from apps.scheduling.push import push_job_run
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.kube.fake_apiserver import (
    cel_compile,
    cel_evaluate,
    device_env,
    dra_sample,
    kubeconfig_for,
)
from tests.kube.validation import assert_strict_valid

pytestmark = pytest.mark.django_db


AMD = "gpu.amd.com"
NVIDIA = "gpu.nvidia.com"
# The ledger's spelling of two MI300X cards' PCI addresses (upper-case hex, as lspci -D / amd-smi
# print them); the driver publishes the kernel's lower-case sysfs name.
AMD_PCI = ["0000:C1:00.0", "0000:E5:00.0"]


@pytest.fixture(autouse=True)
def secrets_dir(settings, tmp_path):
    """The kubeconfigs written under ``tmp_path`` are in the secrets directory (a Cluster's path must be)."""
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path)}


@pytest.fixture
def mi300x(db):
    model = DeviceModel.objects.create(
        vendor="amd", kind="gpu", name="Instinct MI300X", slug="mi300x", memory_mib=196608
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("1.0000"), effective_from=date(2024, 1, 1)
    )
    return model


def amd_device(name: str, pci_addr: str) -> dict:
    """The AMD driver's real GPU device (docs/demo.md), at ``pci_addr`` in the driver's spelling
    (the sysfs directory name, SOURCES.md) — the sample's own address has no hex letters."""
    (device,) = dra_sample("amd-gpu-resourceslice")["spec"]["devices"]
    device["name"] = name
    device["attributes"]["pciAddr"] = {"string": pci_addr}
    return device


def amd_slice(node: str, devices: list[dict], generation: int = 1) -> dict:
    """The AMD sample slice, with what its trim dropped filled as the driver fills it: driver
    gpu.amd.com, one pool named after the node (cmd/gpu-kubeletplugin/driver.go)."""
    obj = dra_sample("amd-gpu-resourceslice")
    obj["metadata"]["name"] = f"{node}-{AMD}-g{generation}"
    obj["spec"].update(
        driver=AMD,
        nodeName=node,
        pool={"name": node, "generation": generation, "resourceSliceCount": 1},
        devices=devices,
    )
    return obj


def cluster_on(server, tmp_path, modes: dict) -> Cluster:
    cluster = Cluster.objects.create(
        name="Prod",
        slug="prod",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(kubeconfig_for(server, tmp_path)),
        device_plugin_modes=modes,
    )
    Pool.objects.create(cluster=cluster, name="training", slug="training")
    return cluster


def ledger_node(cluster: Cluster, name: str, cards: list[dict], model=None) -> Node:
    node = Node.objects.create(cluster=cluster, pool=cluster.pools.get(slug="training"), name=name)
    for i, fields in enumerate(cards):
        Device.objects.create(node=node, index=i, device_model=model, **fields)
    return node


def device_drift(report) -> list[dict]:
    """The drift about devices (a node's labels and readiness are another matter)."""
    return [d for d in report.drift if d["drift"].startswith(("slice-device:", "ledger-device:"))]


# -- the one spelling -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "spelled"),
    [
        ("0000:C1:00.0", "0000:c1:00.0"),
        ("00000000:C1:00.0", "0000:c1:00.0"),  # nvidia-smi's 8-digit domain
        (" C1:00.0 ", "0000:c1:00.0"),
        ("0003:00:02.0", "0003:00:02.0"),  # the AMD sample's own
        ("", ""),
        ("GPU-13719f71", ""),
        ("0000:C1:00.9", ""),  # a PCI function is 0-7
    ],
)
def test_a_pci_address_is_spelled_as_the_drivers_publish_it(given, spelled):
    assert m.pci_address_sysfs(given) == spelled


# -- AMD: render, push, allocate --------------------------------------------------------------------


def test_an_amd_claim_for_a_card_with_hex_letters_gets_exactly_that_card(
    server, tmp_path, mi300x, member_project
):
    cluster = cluster_on(server, tmp_path, {"amd": "dra"})
    ledger_node(
        cluster,
        "mi-01",
        [{"vendor": "amd", "pci_bus_id": pci, "uuid": f"mi-01-{i}"} for i, pci in enumerate(AMD_PCI)],
        mi300x,
    )
    server.add_node("mi-01")
    server.publish_resource_slice(
        amd_slice("mi-01", [amd_device(f"gpu-{i}-128", pci.lower()) for i, pci in enumerate(AMD_PCI)])
    )
    backend = backend_for(cluster)
    try:  # Suanchi's DeviceClasses (platform/kubernetes/dra), applied like any object
        for obj in m.device_class_manifests():
            assert backend.apply(obj).action in ("created", "unchanged")
    finally:
        backend.close()
    user, project = member_project
    # The first card taken by another job, so the ledger's choice is not "the first free device".
    blocker = submit_whole_cards(project, user, mi300x, 1, name="blocker", image="x:1")
    assert blocker.pk in scheduling_cycle_run().placed_job_ids
    job = submit_whole_cards(project, user, mi300x, 1, name="train", image="x:1")
    assert job.pk in scheduling_cycle_run().placed_job_ids
    for j in (blocker, job):
        assert push_job_run(job_id=j.pk)["failed"] == 0
    (chosen,) = Allocation.objects.filter(job=job, released_at__isnull=True).values_list(
        "device__pci_bus_id", flat=True
    )
    assert any(c in "abcdef" for c in chosen.split(":", 1)[1].lower())

    (claim,) = [
        c for c in server.objects("ResourceClaim") if c["metadata"]["name"].startswith(f"suanchi-{job.pk}-")
    ]
    assert_strict_valid(claim)
    (request,) = claim["spec"]["devices"]["requests"]
    (selector,) = request["exactly"]["selectors"]
    assert f'device.attributes["{AMD}"].pciAddr == "{chosen.lower()}"' in selector["cel"]["expression"]
    server.advance(0)  # the scheduler's DynamicResources plugin allocates the claims and binds
    claim = next(
        c for c in server.objects("ResourceClaim") if c["metadata"]["name"] == claim["metadata"]["name"]
    )
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    (slice_,) = server.objects("ResourceSlice")
    pci_of = {d["name"]: d["attributes"]["pciAddr"]["string"] for d in slice_["spec"]["devices"]}
    assert (result["driver"], result["pool"]) == (AMD, "mi-01")
    assert pci_of[result["device"]] == chosen.lower()


def test_the_upper_case_address_matches_no_real_amd_device():
    """Why the spelling matters: CEL ``==`` on strings is case-sensitive (the fake's CEL as the
    real one), so the old rendering of the ledger's spelling selects nothing."""
    env = device_env(AMD, amd_device("gpu-0-128", "0000:c1:00.0"))
    expr = f'device.attributes["{AMD}"].pciAddr == "%s"'
    assert cel_evaluate(cel_compile(expr % "0000:c1:00.0"), env) is True
    assert cel_evaluate(cel_compile(expr % "0000:C1:00.0"), env) is False


# -- cluster sync: no false drift -------------------------------------------------------------------


def test_sync_finds_amd_cards_and_mig_devices_without_drift(server, tmp_path):
    cluster = cluster_on(server, tmp_path, {"amd": "dra", "nvidia": "dra"})
    (amd_part,) = dra_sample("amd-partition-resourceslice")["spec"]["devices"]
    parent_pci = amd_part["attributes"]["parentPciAddr"]["string"]
    # AMD node: two whole GPUs (ledger spelling upper case, UUIDs from amd-smi that no slice carries)
    # and a card in DPX mode that the driver publishes only as partitions.
    ledger_node(
        cluster,
        "mi-01",
        [
            {"vendor": "amd", "pci_bus_id": pci, "uuid": f"amd-uuid-{i}"}
            for i, pci in enumerate([*AMD_PCI, parent_pci])
        ],
    )
    server.add_node("mi-01")
    slice_ = amd_slice("mi-01", [amd_device(f"gpu-{i}-128", pci.lower()) for i, pci in enumerate(AMD_PCI)])
    slice_["spec"]["devices"].append(amd_part)
    server.publish_resource_slice(slice_)
    # NVIDIA: the MIG-enabled node publishes its MIG device only, not the parent card; the GPU node
    # its GPU.
    mig = dra_sample("nvidia-mig-node-resourceslice")
    gpu = dra_sample("nvidia-gpu-resourceslice")
    (mig_device,) = mig["spec"]["devices"]
    (gpu_device,) = gpu["spec"]["devices"]
    for obj, uuid in (
        (mig, mig_device["attributes"]["parentUUID"]["string"]),
        (gpu, gpu_device["attributes"]["uuid"]["string"]),
    ):
        ledger_node(cluster, obj["spec"]["nodeName"], [{"vendor": "nvidia", "uuid": uuid}])
        server.add_node(obj["spec"]["nodeName"])
        server.publish_resource_slice(obj)

    report = cluster_sync(cluster=cluster)

    assert device_drift(report) == []
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).exists()
    assert {(s["node"], s["pci"]) for s in report.slices if s["node"] == "mi-01"} == {
        ("mi-01", "0000:c1:00.0"),
        ("mi-01", "0000:e5:00.0"),
        ("mi-01", ""),  # the partition: its own PCI address is its parent's, as parentPciAddr
    }

    # Contrast: a card the AMD driver stops publishing is drift (the ledger names it by its UUID).
    slice_["spec"]["devices"] = slice_["spec"]["devices"][1:]
    server.publish_resource_slice(slice_)
    report = cluster_sync(cluster=cluster)
    assert [d["drift"] for d in report.drift if d["drift"].startswith("ledger-device:")] == [
        "ledger-device:amd-uuid-0"
    ]


def test_a_mig_device_of_a_card_the_ledger_lacks_is_drift(server, tmp_path):
    cluster = cluster_on(server, tmp_path, {"nvidia": "dra"})
    mig = dra_sample("nvidia-mig-node-resourceslice")
    ledger_node(cluster, mig["spec"]["nodeName"], [{"vendor": "nvidia", "uuid": "GPU-someone-else"}])
    server.add_node(mig["spec"]["nodeName"])
    server.publish_resource_slice(mig)
    report = cluster_sync(cluster=cluster)
    assert sorted(d["drift"].split(":")[0] for d in device_drift(report)) == ["ledger-device", "slice-device"]


# -- pool generations --------------------------------------------------------------------------------


def stale_and_current(server) -> None:
    """The AMD driver restarted on mi-01: generation 1 still lists a card that is gone (E5),
    generation 2 is the current pool."""
    stale = [amd_device(f"gpu-{i}-128", p.lower()) for i, p in enumerate(AMD_PCI)]
    server.publish_resource_slice(amd_slice("mi-01", stale, generation=1))
    server.publish_resource_slice(amd_slice("mi-01", [amd_device("gpu-0-128", AMD_PCI[0].lower())], 2))


def test_sync_ignores_a_stale_generation_slice(server, tmp_path, mi300x):
    cluster = cluster_on(server, tmp_path, {"amd": "dra"})
    ledger_node(cluster, "mi-01", [{"vendor": "amd", "pci_bus_id": AMD_PCI[0], "uuid": "amd-uuid-0"}], mi300x)
    server.add_node("mi-01")
    stale_and_current(server)

    assert len(server.objects("ResourceSlice")) == 2  # both still listed
    assert [d.pci for d in slices_parse(server.objects("ResourceSlice"))] == ["0000:c1:00.0"]
    report = cluster_sync(cluster=cluster)
    assert device_drift(report) == []  # the stale E5 device is not "a device the ledger lacks"


def test_the_allocator_ignores_a_stale_generation_slice(fake_server, fake_api, fake_core):
    fake_server.add_node("mi-01")
    stale_and_current(fake_server)
    dra = k8s.ResourceV1Api(fake_api)
    for obj in m.device_class_manifests():
        dra.create_device_class(obj)
    fake_core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "p"}})
    for name, pci in (("gone", AMD_PCI[1]), ("here", AMD_PCI[0])):
        expression = f'device.attributes["{AMD}"].pciAddr == "{m.pci_address_sysfs(pci)}"'
        exactly = {"deviceClassName": AMD, "selectors": [{"cel": {"expression": expression}}]}
        dra.create_namespaced_resource_claim(
            "p",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            },
        )
        fake_core.create_namespaced_pod(
            "p",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "containers": [
                        {"name": "main", "image": "x:1", "resources": {"claims": [{"name": "gpu"}]}}
                    ],
                },
            },
        )
    assert fake_core.read_namespaced_pod("gone", "p").spec.node_name is None  # only in generation 1
    assert dra.read_namespaced_resource_claim("gone", "p").status is None
    (result,) = dra.read_namespaced_resource_claim("here", "p").status.allocation.devices.results
    assert (result.driver, result.pool, result.device) == (AMD, "mi-01", "gpu-0-128")
    assert fake_core.read_namespaced_pod("here", "p").spec.node_name == "mi-01"


def test_an_amd_partition_claim_selects_the_partition_by_its_parents_address():
    """A partition carries its card's address as ``parentPciAddr`` (the real sample; the driver's
    deviceinfo.go), not as ``pciAddr`` as docs/driver-attributes.md says."""
    (part,) = dra_sample("amd-partition-resourceslice")["spec"]["devices"]
    card = Device(vendor="amd", index=0, pci_bus_id="0003:00:01.0")
    allocation = Allocation(device=card, partition_profile="dpx_nps1")
    devices = m.claim_devices([[allocation]], exact=True)
    (request,) = devices["requests"]
    (selector,) = request["exactly"]["selectors"]
    assert request["exactly"]["deviceClassName"] == AMD
    assert cel_evaluate(cel_compile(selector["cel"]["expression"]), device_env(AMD, part)) is True
    # Another card's partition is not selected.
    other = copy.deepcopy(part)
    other["attributes"]["parentPciAddr"] = {"string": "0003:00:02.0"}
    assert cel_evaluate(cel_compile(selector["cel"]["expression"]), device_env(AMD, other)) is False
