"""Hygon HCU under its DRA driver (dra.hygon.com), on the driver's own device shape
(fixtures/dra/hygon-hcu-resourceslice.yaml, sources in fixtures/dra/SOURCES.md): a whole-card claim
pinned by the card's published ``uuid`` attribute is allocated exactly that card by the fake's
allocator, and the objects are strict-valid for Kubernetes 1.34-1.36."""

from __future__ import annotations

import copy
import time
from datetime import date
from decimal import Decimal

import kubernetes_validate
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel
from apps.clusters import hygon, sharing
from apps.clusters import manifests as m
from apps.clusters.connections import backend_for
from apps.clusters.models import PushAction
from apps.clusters.sync import WHOLE_DEVICE_RESOURCES, cluster_sync, is_accelerator_resource, slices_parse
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.jobs.models import Allocation
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.push import push_job_run
from apps.scheduling.services import scheduling_cycle_run
from apps.telemetry.readback import readback
from tests.fixtures.jobs import submit_whole_cards
from tests.kube.fake_apiserver import FakeApiServer, dra_sample, kubeconfig_for
from tests.kube.test_manifests import allocs, limits, make_job, validate
from tests.kube.test_sharing import fraction
from tests.kube.validation import assert_strict_valid

HYGON = "dra.hygon.com"

# HYGON-AI/k8s-hcu-dra-driver deployments/static/hcu-dra-driver.yaml (commit
# cbc4e9dd09e2d22bef5c150a9e883ddc00d46fab): the DeviceClass the driver's manifest creates.
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": HYGON},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": f'device.driver == "{HYGON}" && device.attributes["{HYGON}"].type == "hcu"'
                }
            }
        ]
    },
}


def hcu_slice(node: str, uuids: list[str]) -> dict:
    """The fixture's slice on ``node`` with one device per uuid (device names follow the driver's
    ``hcu-<pci>`` rule, one PCI bus per card)."""
    obj = dra_sample("hygon-hcu-resourceslice")
    (device,) = obj["spec"]["devices"]
    devices = []
    for i, uuid in enumerate(uuids):
        d = copy.deepcopy(device)
        d["name"] = f"hcu-0000-{0x3B + i:02x}-00-0"
        d["attributes"]["uuid"] = {"string": uuid}
        devices.append(d)
    obj["metadata"]["name"] = f"{node}-{HYGON}-xxxxx"
    obj["spec"].update(nodeName=node, pool={"name": node, "generation": 1, "resourceSliceCount": 1})
    obj["spec"]["devices"] = devices
    return obj


def whole_card_claim(name: str, uuid: str) -> dict:
    expression = f'device.attributes["{HYGON}"].uuid == "{uuid}"'
    exactly = {"deviceClassName": HYGON, "selectors": [{"cel": {"expression": expression}}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "p"},
        "spec": {"devices": {"requests": [{"name": "hcu", "exactly": exactly}]}},
    }


@pytest.mark.parametrize("version", ["1.34.0", "1.35.0", "1.36.0"])
def test_the_driver_objects_are_strict_valid(version):
    for obj in (
        dra_sample("hygon-hcu-resourceslice"),
        DEVICE_CLASS,
        whole_card_claim("c", "TPXS300002100601"),
    ):
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_fixture_has_the_drivers_consumable_shape():
    (device,) = dra_sample("hygon-hcu-resourceslice")["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"]["type"] == {"string": "hcu"}
    assert set(device["capacity"]) == {"cores", "memory", "slices"}
    assert device["capacity"]["slices"]["value"] == "4"  # MaxVDevicesPerHCU


def test_a_whole_card_claim_pinned_by_uuid_gets_exactly_that_card(fake_server, fake_api, fake_core):
    fake_server.add_node("hcu-node-1")
    fake_server.publish_resource_slice(hcu_slice("hcu-node-1", ["HCU-UUID-A", "HCU-UUID-B"]))
    dra = k8s.ResourceV1Api(fake_api)
    dra.create_device_class(DEVICE_CLASS)
    fake_core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "p"}})
    dra.create_namespaced_resource_claim("p", whole_card_claim("pinned", "HCU-UUID-B"))
    fake_core.create_namespaced_pod(
        "p",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pinned"},
            "spec": {
                "restartPolicy": "Never",
                "resourceClaims": [{"name": "hcu", "resourceClaimName": "pinned"}],
                "containers": [{"name": "main", "image": "x:1", "resources": {"claims": [{"name": "hcu"}]}}],
            },
        },
    )
    (result,) = dra.read_namespaced_resource_claim("pinned", "p").status.allocation.devices.results
    assert (result.driver, result.pool, result.device) == (HYGON, "hcu-node-1", "hcu-0000-3c-00-0")
    assert fake_core.read_namespaced_pod("pinned", "p").spec.node_name == "hcu-node-1"


def fraction_claim(name: str, cores: str, memory: str) -> dict:
    """The driver's deployments/examples/resourceclaim-hcu-basic.yaml shape: ``exactly.capacity.requests``
    for cores / memory (the example asks 60 cores, 20Gi)."""
    claim = whole_card_claim(name, "TPXS300002100601")
    claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {"cores": cores, "memory": memory}
    }
    return claim


def claim_pod(core, name: str) -> None:
    core.create_namespaced_pod(
        "p",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "resourceClaims": [{"name": "hcu", "resourceClaimName": name}],
                "containers": [{"name": "main", "image": "x:1", "resources": {"claims": [{"name": "hcu"}]}}],
            },
        },
    )


@pytest.mark.parametrize("version", ["1.34.0", "1.35.0", "1.36.0"])
def test_a_fraction_claim_is_strict_valid(version):
    kubernetes_validate.validate(fraction_claim("f", "60", "20Gi"), version, strict=True)


def test_fractions_share_one_card_until_its_cores_are_spent(fake_server, fake_api, fake_core):
    fake_server.add_node("hcu-node-1")
    fake_server.publish_resource_slice(hcu_slice("hcu-node-1", ["TPXS300002100601"]))
    dra = k8s.ResourceV1Api(fake_api)
    dra.create_device_class(DEVICE_CLASS)
    fake_core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "p"}})
    for name, cores in (("a", "60"), ("b", "59.5"), ("c", "1")):
        dra.create_namespaced_resource_claim("p", fraction_claim(name, cores, "20Gi"))
        claim_pod(fake_core, name)
    results = {}
    for name in ("a", "b"):
        (r,) = dra.read_namespaced_resource_claim(name, "p").status.allocation.devices.results
        results[name] = r
        assert r.device == "hcu-0000-3b-00-0" and r.share_id
    assert results["a"].consumed_capacity == {"cores": "60", "memory": "20Gi", "slices": "1"}
    assert results["b"].consumed_capacity["cores"] == "60"  # rounded up to the step of 1 core
    assert results["a"].share_id != results["b"].share_id
    # 120 cores are spent: the third fraction waits, it does not get the card exclusively.
    assert dra.read_namespaced_resource_claim("c", "p").status is None
    assert fake_core.read_namespaced_pod("c", "p").spec.node_name is None


def test_a_request_above_the_cards_memory_never_fits(fake_server, fake_api, fake_core):
    fake_server.add_node("hcu-node-1")
    fake_server.publish_resource_slice(hcu_slice("hcu-node-1", ["TPXS300002100601"]))
    dra = k8s.ResourceV1Api(fake_api)
    dra.create_device_class(DEVICE_CLASS)
    fake_core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "p"}})
    dra.create_namespaced_resource_claim("p", fraction_claim("big", "10", "80Gi"))
    claim_pod(fake_core, "big")
    assert dra.read_namespaced_resource_claim("big", "p").status is None


# ---------------------------------------------------------------------------------------------------
# End to end: ledger → schedule → render → push to the fake API server → allocate → read back, in each
# of Suanchi's two HCU modes (apps/clusters/hygon.py has the facts and their sources).
# ---------------------------------------------------------------------------------------------------

# Three K100_AI cards of one node, as the ledger holds them (hy-smi prints PCI addresses upper case;
# the DRA driver publishes the kernel's lower-case sysfs spelling in its device names).
HCU_UUIDS = ["TPXS300002100601", "TPXS300002100602", "TPXS300002100603"]
HCU_PCI = ["0000:3B:00.0", "0000:3C:00.0", "0000:3D:00.0"]


@pytest.fixture
def dra_server():
    srv = FakeApiServer(timeout_delay=1.5).start()
    yield srv
    srv.stop()


@pytest.fixture
def secrets_dir(settings, tmp_path):
    """The kubeconfigs written under ``tmp_path`` are in the secrets directory (a Cluster's path must be)."""
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path)}


@pytest.fixture
def k100_ai(db):
    """The catalog's DCU K100_AI row (apps/catalog/data/device_models.yaml): 64 GiB, 120 compute units
    (``ai_cores``; the driver's ``cores`` capacity)."""
    model = DeviceModel.objects.create(
        vendor="hygon", kind="dcu", name="DCU K100_AI", slug="dcu-k100-ai", memory_mib=65536, ai_cores=120
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("0.5000"), effective_from=date(2024, 1, 1), basis="policy"
    )
    return model


def hcu_cluster(server, tmp_path, mode: str, cards: int, model) -> Cluster:
    cluster = Cluster.objects.create(
        name="Prod",
        slug="prod",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(kubeconfig_for(server, tmp_path)),
        device_plugin_modes={"hygon": mode},
    )
    pool = Pool.objects.create(cluster=cluster, name="training", slug="training")
    node = Node.objects.create(cluster=cluster, pool=pool, name="hcu-node-1")
    for i in range(cards):
        Device.objects.create(
            node=node, vendor="hygon", index=i, uuid=HCU_UUIDS[i], pci_bus_id=HCU_PCI[i], device_model=model
        )
    return cluster


def apply_device_classes(cluster: Cluster) -> None:
    backend = backend_for(cluster)
    try:  # Suanchi's DeviceClasses (platform/kubernetes/dra), applied like any object
        for obj in m.device_class_manifests():
            assert backend.apply(obj).action in ("created", "unchanged")
    finally:
        backend.close()


def pushed(server, job, kind: str) -> dict:
    (obj,) = [o for o in server.objects(kind) if o["metadata"]["name"].startswith(f"suanchi-{job.pk}-")]
    return obj


def ledger_card(job) -> Device:
    (allocation,) = Allocation.objects.filter(job=job, released_at__isnull=True).select_related("device")
    return allocation.device


def claim_result(server, claim: dict) -> dict:
    claim = next(
        c for c in server.objects("ResourceClaim") if c["metadata"]["name"] == claim["metadata"]["name"]
    )
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return result


def slice_uuid(server, device_name: str) -> str:
    (slice_,) = server.objects("ResourceSlice")
    return {d["name"]: d["attributes"]["uuid"]["string"] for d in slice_["spec"]["devices"]}[device_name]


@pytest.mark.django_db
def test_a_whole_card_under_the_hcu_device_plugin_end_to_end(
    dra_server, tmp_path, secrets_dir, k100_ai, member_project
):
    """Mode ``hcu``: ``hygon.com/hcu`` counts. The plugin pins nothing (its GetPreferredAllocation is
    empty; Allocate takes the kubelet's device IDs, the cards' PCI bus numbers — read in
    HYGON-AI/k8s-hcu-device-plugin internal/pkg/plugin/plugin.go), so the card is read back: the
    kubelet's device ID (PCI bus number) → the ledger card, through apps.telemetry.readback."""
    cluster = hcu_cluster(dra_server, tmp_path, "hcu", 3, k100_ai)
    dra_server.add_node("hcu-node-1", capacity={"hygon.com/hcu": "3"})
    user, project = member_project
    blocker = submit_whole_cards(project, user, k100_ai, 1, name="blocker", image="x:1")
    assert blocker.pk in scheduling_cycle_run().placed_job_ids
    job = submit_whole_cards(project, user, k100_ai, 1, name="train", image="x:1")
    assert job.pk in scheduling_cycle_run().placed_job_ids
    for j in (blocker, job):
        assert push_job_run(job_id=j.pk)["failed"] == 0

    workload = pushed(dra_server, job, "Job")
    assert_strict_valid(workload)
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"hygon.com/hcu": "1"}  # demo/pytorch-hcu.yaml's name
    assert not [c for c in dra_server.objects("ResourceClaim")]
    dra_server.advance(0)
    (pod,) = [p for p in dra_server.objects("Pod") if p["metadata"]["name"].startswith(f"suanchi-{job.pk}-")]
    assert pod["spec"]["nodeName"] == "hcu-node-1"

    # The kubelet gave the pod the card at 0000:3d:00.0 (the free one), not the ledger's: the read-back
    # moves the allocation there — the ledger names the card the pod runs on.
    chosen = ledger_card(job)
    held = ledger_card(blocker)
    (free,) = Device.objects.filter(vendor="hygon").exclude(pk__in=[chosen.pk, held.pk])
    namespace = pod["metadata"]["namespace"]
    result = readback(
        pods_by_device={free.pk: {(namespace, pod["metadata"]["name"])}},
        seen_at={d.pk: time.time() for d in Device.objects.filter(vendor="hygon")},
        actor_label="test",
    )
    assert len(result.moved) == 1 and not result.conflicts
    assert ledger_card(job).pk == free.pk
    # Read again: the ledger already matches, nothing moves twice.
    again = readback(
        pods_by_device={free.pk: {(namespace, pod["metadata"]["name"])}},
        seen_at={d.pk: time.time() for d in Device.objects.filter(vendor="hygon")},
        actor_label="test",
    )
    assert not again.moved and not again.conflicts

    # Cluster sync: hygon.com/hcu is the node's whole-card resource; 3 allocatable = 3 healthy cards.
    report = cluster_sync(cluster=cluster)
    assert [d for d in report.drift if d["drift"].startswith("allocatable:")] == []
    assert report.nodes[0]["capacity"] == {"hygon.com/hcu": 3}


@pytest.mark.django_db
def test_a_whole_card_under_the_hcu_dra_driver_end_to_end(
    dra_server, tmp_path, secrets_dir, k100_ai, member_project
):
    cluster = hcu_cluster(dra_server, tmp_path, "hcu-dra", 3, k100_ai)
    dra_server.add_node("hcu-node-1", labels={"hcu": "on"})  # the driver's DaemonSet nodeSelector
    dra_server.publish_resource_slice(hcu_slice("hcu-node-1", HCU_UUIDS))
    apply_device_classes(cluster)
    user, project = member_project
    blocker = submit_whole_cards(project, user, k100_ai, 1, name="blocker", image="x:1")
    assert blocker.pk in scheduling_cycle_run().placed_job_ids
    job = submit_whole_cards(project, user, k100_ai, 1, name="train", image="x:1")
    assert job.pk in scheduling_cycle_run().placed_job_ids
    for j in (blocker, job):
        assert push_job_run(job_id=j.pk)["failed"] == 0
    chosen = ledger_card(job)
    assert ledger_card(blocker).pk != chosen.pk  # not merely "the first free device"

    claim = pushed(dra_server, job, "ResourceClaim")
    workload = pushed(dra_server, job, "Job")
    for obj in (claim, workload):
        assert_strict_valid(obj)
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "dra.hygon.com"
    assert "capacity" not in request["exactly"]  # resourceclaim-hcu-physical.yaml: the whole card
    (selector,) = request["exactly"]["selectors"]
    assert selector["cel"]["expression"] == f'device.attributes["dra.hygon.com"].uuid == "{chosen.uuid}"'
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert "limits" not in container["resources"]  # no hygon.com/hcu count next to the claim

    dra_server.advance(0)  # the DynamicResources plugin allocates the claims and binds the pods
    result = claim_result(dra_server, claim)
    assert (result["driver"], result["pool"]) == ("dra.hygon.com", "hcu-node-1")
    assert slice_uuid(dra_server, result["device"]) == chosen.uuid
    # The whole card's default capacity (all cores, all memory) is consumed: no vHCU fits beside it.
    assert result["consumedCapacity"]["cores"] == "120"

    report = cluster_sync(cluster=cluster)
    assert [d for d in report.drift if d["drift"].startswith(("slice-device:", "ledger-device:"))] == []


@pytest.mark.django_db
def test_a_vhcu_fraction_under_the_hcu_dra_driver_end_to_end(
    dra_server, tmp_path, secrets_dir, k100_ai, member_project
):
    """Two half cards (60 of 120 compute units, 20 GiB each) as vHCUs of the one card: each claim
    pins the card by uuid and asks ``capacity.requests`` cores / memory (resourceclaim-hcu-basic.yaml);
    both are allocated on that card, with their own share IDs."""
    cluster = hcu_cluster(dra_server, tmp_path, "hcu-dra", 1, k100_ai)
    dra_server.add_node("hcu-node-1", labels={"hcu": "on"})
    dra_server.publish_resource_slice(hcu_slice("hcu-node-1", HCU_UUIDS[:1]))
    apply_device_classes(cluster)
    half = ComputeTemplate.objects.create(
        device_model=k100_ai,
        name="K100_AI half",
        slug="k100-ai-half",
        memory_mib=20480,
        compute_share=Decimal("50"),
        isolation="hard",
        max_instances=2,
    )
    user, project = member_project
    jobs = [
        job_submit(
            project=project, actor=user, name=f"v{i}", image="x:1", request_kind="template", template=half
        )
        for i in range(2)
    ]
    placed = scheduling_cycle_run().placed_job_ids
    assert all(j.pk in placed for j in jobs)
    for j in jobs:
        assert push_job_run(job_id=j.pk)["failed"] == 0

    claims = [pushed(dra_server, j, "ResourceClaim") for j in jobs]
    for j, claim in zip(jobs, claims, strict=True):
        assert_strict_valid(claim)
        assert_strict_valid(pushed(dra_server, j, "Job"))
        (request,) = claim["spec"]["devices"]["requests"]
        # Rendered 20480Mi; the API server stores quantities in canonical form.
        assert request["exactly"]["capacity"] == {"requests": {"cores": "60", "memory": "20Gi"}}
        (selector,) = request["exactly"]["selectors"]
        assert selector["cel"]["expression"] == f'device.attributes["dra.hygon.com"].uuid == "{HCU_UUIDS[0]}"'
        allocation = Allocation.objects.get(job=j, released_at__isnull=True)
        assert not allocation.whole_card and allocation.compute_milli == 500

    dra_server.advance(0)
    results = [claim_result(dra_server, c) for c in claims]
    for j, result in zip(jobs, results, strict=True):
        assert slice_uuid(dra_server, result["device"]) == ledger_card(j).uuid == HCU_UUIDS[0]
        assert result["consumedCapacity"] == {"cores": "60", "memory": "20Gi", "slices": "1"}
    assert results[0]["shareID"] != results[1]["shareID"]
    # The vHCUs are capacity on the card's one device, not devices of their own: no drift.
    report = cluster_sync(cluster=cluster)
    assert [d for d in report.drift if d["drift"].startswith(("slice-device:", "ledger-device:"))] == []


# -- refusals and the DCU names ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hcu", "plain"])
def test_a_fraction_in_a_mode_that_gives_whole_cards_is_refused_with_the_reason(mode):
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(
            make_job(),
            fraction("hygon", memory=20480, milli=500),
            Cluster(device_plugin_modes={"hygon": mode}),
            attempt=0,
        )
    assert err.value.code == "fraction_not_shareable"
    assert err.value.message == sharing.fraction_refusal("hygon", mode)
    assert "hcu-dra" in err.value.message and "hami" in err.value.message and mode in err.value.message


@pytest.mark.django_db
def test_a_fraction_refused_at_render_is_not_placed_and_nothing_is_pushed(
    dra_server, tmp_path, secrets_dir, k100_ai, member_project
):
    hcu_cluster(dra_server, tmp_path, "hcu", 1, k100_ai)
    dra_server.add_node("hcu-node-1", capacity={"hygon.com/hcu": "1"})
    half = ComputeTemplate.objects.create(
        device_model=k100_ai,
        name="half",
        slug="half",
        memory_mib=20480,
        compute_share=Decimal("50"),
        isolation="hard",
        max_instances=2,
    )
    user, project = member_project
    job = job_submit(
        project=project, actor=user, name="v", image="x:1", request_kind="template", template=half
    )
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    assert not Allocation.objects.filter(job=job).exists()
    assert not PushAction.objects.filter(job=job).exists()
    assert dra_server.objects("Job") == []


def test_a_vhcu_needs_the_cards_compute_units_and_a_memory_size():
    allocation = fraction("hygon", memory=20480, milli=500)
    with pytest.raises(ValidationFailed) as err:  # no catalog model: compute units unknown
        m.job_manifest(make_job(), allocation, Cluster(device_plugin_modes={"hygon": "hcu-dra"}), attempt=0)
    assert err.value.code == "fraction_not_shareable" and "compute units" in err.value.message
    model = DeviceModel(pk=7, vendor="hygon", kind="dcu", name="DCU K100_AI", slug="k", ai_cores=120)
    for a in allocation:
        a.device.device_model = model
    obj = next(
        o
        for o in m.workload_objects(
            make_job(), allocation, Cluster(device_plugin_modes={"hygon": "hcu-dra"}), attempt=0
        )
        if o["kind"] == "ResourceClaim"
    )
    (request,) = obj["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"cores": "60", "memory": "20480Mi"}
    for a in allocation:
        a.memory_mib, a.compute_milli = 0, 1  # 0.1 % of 120 CUs rounds up to 1 CU, but no memory
    with pytest.raises(ValidationFailed) as err:
        m.workload_objects(
            make_job(), allocation, Cluster(device_plugin_modes={"hygon": "hcu-dra"}), attempt=0
        )
    assert "memory" in err.value.message
    for a in allocation:
        a.memory_mib = 1
    obj = m.workload_objects(
        make_job(), allocation, Cluster(device_plugin_modes={"hygon": "hcu-dra"}), attempt=0
    )
    (request,) = obj[0]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"cores": "1", "memory": "1Mi"}


def test_the_dcu_names_keep_working_and_dra_mode_says_where_the_hcu_driver_is():
    cards = allocs("hygon", ["node-01"], 2)
    plain = m.job_manifest(make_job(), cards, Cluster(), attempt=0)
    assert limits(plain) == {"hygon.com/dcu": "2"}
    hcu = m.job_manifest(make_job(), cards, Cluster(device_plugin_modes={"hygon": "hcu"}), attempt=0)
    validate(hcu)
    assert limits(hcu) == {"hygon.com/hcu": "2"}
    hami = m.job_manifest(
        make_job(),
        fraction("hygon", memory=2000, milli=600),
        Cluster(device_plugin_modes={"hygon": "hami"}),
        attempt=0,
    )
    assert limits(hami) == {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "60"}
    dra = m.job_manifest(make_job(), cards, Cluster(device_plugin_modes={"hygon": "dra"}), attempt=0)
    assert limits(dra) == {"hygon.com/dcu": "2"}
    assert "dra.hygon.com is mode hcu-dra" in dra["metadata"]["annotations"][m.ANN_DRA_FALLBACK]


def test_the_mode_is_one_the_cluster_form_accepts():
    from django.core.exceptions import ValidationError

    for mode in ("hcu", "hcu-dra"):
        Cluster(name="c", slug="c", device_plugin_modes={"hygon": mode}).clean()
    with pytest.raises(ValidationError):
        Cluster(name="c", slug="c", device_plugin_modes={"hygon": "hcu-vhcu"}).clean()


# -- cluster sync on the driver's slices --------------------------------------------------------------


def test_a_device_name_gives_the_pci_address_the_driver_encoded():
    assert hygon.device_name_pci("hcu-0000-3b-00-0") == "0000:3b:00.0"
    assert hygon.device_name_pci("hcu-0000-3B-00-0") == "0000:3b:00.0"
    assert hygon.device_name_pci("gpu-0") == ""
    assert hygon.device_name_pci("hcu-0000-3b-00-9") == ""  # a PCI function is 0-7
    (device,) = slices_parse([hcu_slice("n", ["U"])])
    assert (device.uuid, device.pci) == ("U", "0000:3b:00.0")


@pytest.mark.django_db
def test_sync_matches_hcu_cards_by_uuid_learns_a_missing_uuid_and_reports_a_lost_card(
    dra_server, tmp_path, secrets_dir, k100_ai
):
    cluster = hcu_cluster(dra_server, tmp_path, "hcu-dra", 3, k100_ai)
    # Card 1 is known to the ledger by its PCI address only (hy-smi prints no UUID).
    Device.objects.filter(uuid=HCU_UUIDS[1]).update(uuid=None)
    dra_server.add_node("hcu-node-1", labels={"hcu": "on"})
    dra_server.publish_resource_slice(hcu_slice("hcu-node-1", HCU_UUIDS))
    report = cluster_sync(cluster=cluster)
    assert [d for d in report.drift if d["drift"].startswith(("slice-device:", "ledger-device:"))] == []
    assert Device.objects.get(pci_bus_id=HCU_PCI[1]).uuid == HCU_UUIDS[1]
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).exists()

    # Contrast: the driver stops publishing card 2 — drift on the ledger's card, named by its uuid.
    obj = hcu_slice("hcu-node-1", HCU_UUIDS[:2])
    obj["spec"]["pool"]["generation"] = 2
    dra_server.publish_resource_slice(obj)
    report = cluster_sync(cluster=cluster)
    assert [d["drift"] for d in report.drift if d["drift"].startswith(("slice-", "ledger-"))] == [
        f"ledger-device:{HCU_UUIDS[2]}"
    ]


def test_hcu_plugin_resources_are_cards_or_slices_as_the_plugin_means_them():
    assert WHOLE_DEVICE_RESOURCES["hygon.com/hcu"] == "hygon"
    for name in ("hygon.com/hcu-share-4c-16g", "hygon.com/hcu-mig-4g-31gb", "hygon.com/hcunum"):
        assert is_accelerator_resource(name) and name not in WHOLE_DEVICE_RESOURCES


# -- Test connection ----------------------------------------------------------------------------------


def hcu_daemonset(name: str, env: list[dict]) -> dict:
    """A DaemonSet shaped like the vendor's static manifest (image and mounts trimmed)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": name}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {"containers": [{"name": "c", "image": "hcu:v3.0.0", "env": env}]},
            },
        },
    }


@pytest.mark.django_db
def test_test_connection_names_the_hcu_plugin_with_its_strategy_and_the_dra_driver(
    dra_server, tmp_path, secrets_dir, k100_ai
):
    from apps.clusters.connect import cluster_probe

    cluster = hcu_cluster(dra_server, tmp_path, "hcu", 1, k100_ai)
    api_client = k8s_config.new_client_from_config(config_file=cluster.kubeconfig_path)
    try:
        k8s.CoreV1Api(api_client).create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}
        )
        for obj in (
            # deployment/static/k8s-hcu-plugin.yaml (RESOURCE_REGISTER_STRATEGY "mixed"), -hami.yaml
            hcu_daemonset("hcu-device-plugin", [{"name": "RESOURCE_REGISTER_STRATEGY", "value": "mixed"}]),
            hcu_daemonset(
                "hcu-device-plugin-hami", [{"name": "RESOURCE_REGISTER_STRATEGY", "value": "hami"}]
            ),
            hcu_daemonset("hcu-dra-driver", [{"name": "CDI_ROOT", "value": "/var/run/cdi"}]),
            hcu_daemonset("hcu-exporter", []),
        ):
            k8s.AppsV1Api(api_client).create_namespaced_daemon_set("kube-system", obj)
    finally:
        api_client.close()
    plugins = {p["daemonset"]: p for p in cluster_probe(cluster)["plugins"]}
    assert plugins["kube-system/hcu-device-plugin"]["what"] == "Hygon HCU device plugin"
    assert plugins["kube-system/hcu-device-plugin"]["strategy"] == "mixed"
    assert plugins["kube-system/hcu-device-plugin-hami"]["strategy"] == "hami"
    assert plugins["kube-system/hcu-dra-driver"]["what"] == "Hygon HCU DRA driver"
    assert plugins["kube-system/hcu-exporter"]["what"] == "Hygon HCU exporter"
