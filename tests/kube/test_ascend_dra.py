"""Huawei Ascend under HAMi's DRA driver (``ascend.project-hami.io``, cluster mode ``ascend-dra``), on
the driver's own device shape (fixtures/dra/ascend-hamivnpucore-resourceslice.yaml, sources in
fixtures/dra/SOURCES.md): ledger → schedule → render → push to the fake API server → allocate by the
fake's DRA allocator (consumable capacity) → read back the chip, for a whole chip and for shares;
cluster sync on those slices finds no drift; what the driver would refuse is refused before a push.

The driver's behaviour was read in its source (Project-HAMi/ascend-dra-driver @ dc1db52e, see
``apps/clusters/ascend.py``), not run: no Ascend host here. The fixture's two chips are the ones of
HAMi's published lab run (310P3, ``physicalID`` 0 and 2); the ledger here names them by those physical
ids, as ``npu-smi info`` does on layouts with a ``Phy-ID`` column.
"""

from __future__ import annotations

import copy
from datetime import date
from decimal import Decimal

import pytest

from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel
from apps.clusters import ascend, sharing
from apps.clusters import manifests as m
from apps.clusters.connections import backend_for
from apps.clusters.models import PushAction
from apps.clusters.sync import cluster_sync, slices_parse
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.jobs.models import Allocation
from apps.scheduling.lifecycle import job_submit
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
from tests.kube.test_manifests import allocs, make_job
from tests.kube.validation import assert_strict_valid

DRIVER = "ascend.project-hami.io"
CLASS = "hami-vnpu-core.project-hami.io"
SAMPLE = "ascend-hamivnpucore-resourceslice"
NODE = "aio-node74-arm"  # the lab's node
# The lab's two 310P3 chips: (device name, physicalID, PCI bus from its npu-smi table).
CHIPS = [("npu-0-0", 0, "0000:81:00.0"), ("npu-1-0", 2, "0000:85:00.0")]


@pytest.fixture
def secrets_dir(settings, tmp_path):
    """The kubeconfigs written under ``tmp_path`` are in the secrets directory (a Cluster's path must be)."""
    settings.SUANCHI = {**settings.SUANCHI, "SECRETS_DIR": str(tmp_path)}


@pytest.fixture
def a310p3(db):
    """A 310P3 with the memory the driver publishes for it in the lab (21525Mi, "matches npu-smi")."""
    model = DeviceModel.objects.create(
        vendor="huawei", kind="npu", name="Ascend 310P3", slug="ascend-310p3", memory_mib=21525
    )
    ComputeCoefficient.objects.create(
        device_model=model, value=Decimal("0.3000"), effective_from=date(2024, 1, 1), basis="policy"
    )
    return model


def ascend_cluster(server, tmp_path, model, mode: str = "ascend-dra") -> Cluster:
    cluster = Cluster.objects.create(
        name="Prod",
        slug="prod",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(kubeconfig_for(server, tmp_path)),
        device_plugin_modes={"huawei": mode},
    )
    pool = Pool.objects.create(cluster=cluster, name="training", slug="training")
    node = Node.objects.create(cluster=cluster, pool=pool, name=NODE)
    for _name, phy, pci in CHIPS:
        Device.objects.create(
            node=node, vendor="huawei", index=phy, pci_bus_id=pci, device_model=model, memory_mib=21525
        )
    return cluster


def publish(server) -> None:
    server.add_node(NODE)
    server.publish_resource_slice(dra_sample(SAMPLE))


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


def physical_id(server, device_name: str) -> int:
    """The read-back: the allocated device's ``physicalID`` in the driver's slice."""
    (slice_,) = server.objects("ResourceSlice")
    return {d["name"]: d["attributes"]["physicalID"]["int"] for d in slice_["spec"]["devices"]}[device_name]


def device_drift(report) -> list[dict]:
    return [d for d in report.drift if d["drift"].startswith(("slice-device:", "ledger-device:"))]


# -- the driver's objects ----------------------------------------------------------------------------


def test_the_fixture_has_the_drivers_hamivnpucore_shape():
    """pkg/consts/consts.go and discovery.go enumerateDevices / buildLibvNPUDeviceCapacities."""
    obj = dra_sample(SAMPLE)
    assert_strict_valid(obj)
    assert obj["spec"]["driver"] == DRIVER
    for device in obj["spec"]["devices"]:
        assert device["allowMultipleAllocations"] is True
        assert set(device["attributes"]) == {
            "index",
            "physicalID",
            "uuid",
            "model",
            "productName",
            "brand",
            "type",
        }
        assert device["attributes"]["type"] == {"string": "HAMivNPUCore"}
        assert set(device["capacity"]) == {"cores", "memory"}
        assert device["capacity"]["cores"]["value"] == "100"
        assert device["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Mi"
    # The chip's logic id (index) is not its physical id: the lab's second chip is index 1, physicalID 2.
    assert [
        (d["attributes"]["index"]["int"], d["attributes"]["physicalID"]["int"])
        for d in obj["spec"]["devices"]
    ] == [
        (0, 0),
        (1, 2),
    ]


def test_the_device_class_is_hami_dras_and_selects_the_drivers_devices():
    (cls,) = [c for c in m.device_class_manifests() if c["metadata"]["name"] == CLASS]
    assert_strict_valid(cls)
    (selector,) = cls["spec"]["selectors"]
    assert selector["cel"]["expression"] == (
        'device.driver == "ascend.project-hami.io" && device.attributes["ascend.project-hami.io"].type == "HAMivNPUCore"'
    )
    assert "extendedResourceName" not in cls["spec"]
    compiled = cel_compile(selector["cel"]["expression"])
    for device in dra_sample(SAMPLE)["spec"]["devices"]:
        assert cel_evaluate(compiled, device_env(DRIVER, device)) is True
    # The full-card / template mode (gate off) publishes type NPU: not this class's.
    npu = copy.deepcopy(dra_sample(SAMPLE)["spec"]["devices"][0])
    npu["attributes"]["type"] = {"string": "NPU"}
    assert cel_evaluate(compiled, device_env(DRIVER, npu)) is False


def test_the_pin_is_a_cel_int_on_physical_id():
    """``physicalID`` is an int attribute: a string literal would never equal it."""
    card = Device(vendor="huawei", index=2)
    devices = m.claim_devices([[Allocation(device=card, whole_card=True)]], exact=True)
    (request,) = devices["requests"]
    assert request["exactly"]["deviceClassName"] == CLASS
    assert "capacity" not in request["exactly"]  # a whole chip: the capacities' defaults (all of it)
    (selector,) = request["exactly"]["selectors"]
    assert selector["cel"]["expression"] == f'device.attributes["{DRIVER}"].physicalID == 2'
    first, second = dra_sample(SAMPLE)["spec"]["devices"]
    compiled = cel_compile(selector["cel"]["expression"])
    assert cel_evaluate(compiled, device_env(DRIVER, second)) is True
    assert cel_evaluate(compiled, device_env(DRIVER, first)) is False
    # Chip 0 is an id, not a missing one.
    devices = m.claim_devices(
        [[Allocation(device=Device(vendor="huawei", index=0), whole_card=True)]], exact=True
    )
    assert devices["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"].endswith("physicalID == 0")


# -- end to end --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_whole_chip_under_the_ascend_dra_driver_end_to_end(
    server, tmp_path, secrets_dir, a310p3, member_project
):
    cluster = ascend_cluster(server, tmp_path, a310p3)
    publish(server)
    apply_device_classes(cluster)
    user, project = member_project
    # The first chip taken by another job, so the ledger's choice is not "the first free device".
    blocker = submit_whole_cards(project, user, a310p3, 1, name="blocker", image="x:1")
    assert blocker.pk in scheduling_cycle_run().placed_job_ids
    job = submit_whole_cards(project, user, a310p3, 1, name="train", image="x:1")
    assert job.pk in scheduling_cycle_run().placed_job_ids
    for j in (blocker, job):
        assert push_job_run(job_id=j.pk)["failed"] == 0

    claims = {j.pk: pushed(server, j, "ResourceClaim") for j in (blocker, job)}
    claim = claims[job.pk]
    workload = pushed(server, job, "Job")
    assert_strict_valid(claim)
    assert_strict_valid(workload)
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == CLASS
    assert "capacity" not in request["exactly"]
    (selector,) = request["exactly"]["selectors"]
    chosen = ledger_card(job)
    assert selector["cel"]["expression"] == f'device.attributes["{DRIVER}"].physicalID == {chosen.index}'
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert "limits" not in container["resources"]  # no huawei.com/Ascend310P count next to the claim
    assert workload["spec"]["template"]["spec"]["resourceClaims"] == [
        {"name": "devices", "resourceClaimName": claim["metadata"]["name"]}
    ]

    server.advance(0)  # the DynamicResources plugin allocates the claims and binds the pods
    for j in (blocker, job):
        result = claim_result(server, claims[j.pk])
        assert (result["driver"], result["pool"]) == (DRIVER, NODE)
        assert physical_id(server, result["device"]) == ledger_card(j).index
    # The whole chip consumes the capacities' defaults: all of it, so no share fits beside it.
    assert claim_result(server, claim)["consumedCapacity"] == {"cores": "100", "memory": "21525Mi"}

    report = cluster_sync(cluster=cluster)
    assert device_drift(report) == []
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).exists()


@pytest.mark.django_db
def test_shares_of_one_chip_under_the_ascend_dra_driver_end_to_end(
    server, tmp_path, secrets_dir, a310p3, member_project
):
    """Two half chips (8 GiB, 50 %) as HAMivNPUCore shares: each claim pins the ledger's chip by
    ``physicalID`` and asks ``capacity.requests`` memory / cores (the driver's demo workloads.yaml.tpl
    shape: ``memory: 1Gi``, ``cores: 50``); both are allocated on that chip, each with its share ID."""
    cluster = ascend_cluster(server, tmp_path, a310p3)
    publish(server)
    apply_device_classes(cluster)
    half = ComputeTemplate.objects.create(
        device_model=a310p3,
        name="310P3 half",
        slug="310p3-half",
        memory_mib=8192,
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
    assert ledger_card(jobs[0]).pk == ledger_card(jobs[1]).pk  # the ledger packs both on one chip
    for j in jobs:
        assert push_job_run(job_id=j.pk)["failed"] == 0

    claims = [pushed(server, j, "ResourceClaim") for j in jobs]
    for j, claim in zip(jobs, claims, strict=True):
        assert_strict_valid(claim)
        assert_strict_valid(pushed(server, j, "Job"))
        (request,) = claim["spec"]["devices"]["requests"]
        # Rendered as 8192Mi; the API server stores the canonical spelling.
        assert request["exactly"]["capacity"] == {"requests": {"cores": "50", "memory": "8Gi"}}
        (selector,) = request["exactly"]["selectors"]
        assert (
            selector["cel"]["expression"]
            == f'device.attributes["{DRIVER}"].physicalID == {ledger_card(j).index}'
        )

    server.advance(0)
    results = [claim_result(server, c) for c in claims]
    for j, result in zip(jobs, results, strict=True):
        assert physical_id(server, result["device"]) == ledger_card(j).index
        assert result["consumedCapacity"] == {"cores": "50", "memory": "8Gi"}
    assert results[0]["shareID"] != results[1]["shareID"]
    # Shares are capacity consumed on the chip's one device, not devices of their own: no drift.
    assert device_drift(cluster_sync(cluster=cluster)) == []


# -- refusals ----------------------------------------------------------------------------------------


def shares(memory: int, milli: int, count: int = 1) -> list[Allocation]:
    result = allocs("huawei", ["node-01"], count, memory=memory, milli=milli)
    for a in result:
        a.whole_card = False
    return result


def test_a_vnpu_template_is_refused_under_hamivnpucore_with_the_reason():
    cards = allocs("huawei", ["node-01"], 1)
    cards[0].partition_profile = "vir02"
    with pytest.raises(ValidationFailed) as err:
        m.workload_objects(
            make_job(), cards, Cluster(device_plugin_modes={"huawei": "ascend-dra"}), attempt=0
        )
    assert err.value.code == "fraction_not_shareable"
    assert "vir02" in err.value.message and "ascend-vnpu" in err.value.message


def test_a_pod_whose_chips_would_consume_different_capacities_is_refused():
    """The driver's Prepare: "capacities must be same across devices currently"."""
    cluster = Cluster(device_plugin_modes={"huawei": "ascend-dra"})
    mixed = shares(4096, 500, 2)
    mixed[1].memory_mib = 8192
    with pytest.raises(ValidationFailed) as err:
        m.workload_objects(make_job(), mixed, cluster, attempt=0)
    assert err.value.code == "fraction_not_shareable"
    assert "capacities must be same across devices currently" in err.value.message
    assert "4096Mi" in err.value.message and "8192Mi" in err.value.message
    whole_and_share = shares(4096, 500, 2)
    whole_and_share[0].whole_card = True
    with pytest.raises(ValidationFailed):
        m.workload_objects(make_job(), whole_and_share, cluster, attempt=0)
    # The same share on both chips is one claim with two pinned requests.
    (claim, _job) = m.workload_objects(make_job(), shares(4096, 500, 2), cluster, attempt=0)
    assert_strict_valid(claim)
    assert [r["exactly"]["capacity"]["requests"] for r in claim["spec"]["devices"]["requests"]] == [
        {"cores": "50", "memory": "4096Mi"}
    ] * 2


def test_a_share_without_memory_is_refused_and_cores_round_up():
    cluster = Cluster(device_plugin_modes={"huawei": "ascend-dra"})
    with pytest.raises(ValidationFailed) as err:
        m.workload_objects(make_job(), shares(0, 500), cluster, attempt=0)
    assert "memory" in err.value.message
    (claim, _job) = m.workload_objects(make_job(), shares(1024, 1), cluster, attempt=0)
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {
        "cores": "1",
        "memory": "1024Mi",
    }


@pytest.mark.parametrize("mode", ["plain", "ascend-vnpu", "dra"])
def test_a_share_in_a_mode_that_cannot_give_it_names_ascend_dra(mode):
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(
            make_job(), shares(4096, 500), Cluster(device_plugin_modes={"huawei": mode}), attempt=0
        )
    assert err.value.message == sharing.fraction_refusal("huawei", mode)
    assert "ascend-dra" in err.value.message


def test_dra_mode_for_huawei_says_its_driver_is_ascend_dra():
    (obj,) = m.workload_objects(
        make_job(), allocs("huawei", ["n"], 1), Cluster(device_plugin_modes={"huawei": "dra"}), attempt=0
    )
    assert obj["kind"] == "Job"
    assert (
        "ascend.project-hami.io is mode ascend-dra"
        in obj["metadata"]["annotations"]["suanchi.io/dra-fallback"]
    )


@pytest.mark.django_db
def test_a_template_refused_at_render_is_not_placed_and_nothing_is_pushed(
    server, tmp_path, secrets_dir, a310p3, member_project
):
    ascend_cluster(server, tmp_path, a310p3)
    publish(server)
    vir02 = ComputeTemplate.objects.create(
        device_model=a310p3,
        name="310P3 vir02",
        slug="310p3-vir02",
        memory_mib=6144,
        compute_share=Decimal("25"),
        isolation="hard",
        max_instances=4,
        partition_profile="vir02",
    )
    user, project = member_project
    job = job_submit(
        project=project, actor=user, name="v", image="x:1", request_kind="template", template=vir02
    )
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    assert "vir02" in job.state_reason and "ascend-vnpu" in job.state_reason
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert not PushAction.objects.filter(job=job).exists()
    assert server.objects("Job") == [] and server.objects("ResourceClaim") == []


# -- cluster sync ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_sync_matches_chips_by_physical_id_and_never_learns_the_drivers_uuid(
    server, tmp_path, secrets_dir, a310p3
):
    cluster = ascend_cluster(server, tmp_path, a310p3)
    publish(server)
    parsed = slices_parse(server.objects("ResourceSlice"))
    assert [(d.device, d.physical_id, d.uuid, d.pci) for d in parsed] == [
        ("npu-0-0", 0, "", ""),
        ("npu-1-0", 2, "", ""),
    ]
    report = cluster_sync(cluster=cluster)
    assert device_drift(report) == []
    assert not Device.objects.filter(node__cluster=cluster, uuid__isnull=False).exclude(uuid="").exists()

    # A ledger whose indexes are not the physical ids (e.g. npu-smi's NPU ids 4 and 5 of the lab's
    # host) is seen as drift both ways, not silently matched.
    Device.objects.filter(node__cluster=cluster, index=2).update(index=5)
    report = cluster_sync(cluster=cluster)
    kinds = sorted(d["drift"].split(":")[0] for d in device_drift(report))
    assert kinds == ["ledger-device", "slice-device"]


def test_the_ascend_driver_constants_are_the_sources():
    assert (ascend.DRA_DRIVER, ascend.DRA_DEVICE_CLASS, ascend.DRA_DEVICE_TYPE) == (
        DRIVER,
        CLASS,
        "HAMivNPUCore",
    )
    assert m.DRA_DRIVERS["huawei"].mode == "ascend-dra"
    assert sharing.FRACTION_MODES["huawei"] == ("ascend-dra",)
    assert "ascend-dra" in Cluster.PluginMode.values


# -- the driver's feature gate, read by Test connection ----------------------------------------------


def kubeletplugin_daemonset(args: list[str] | None) -> dict:
    """The chart's kubelet-plugin DaemonSet as templates/kubeletplugin.yaml renders it (trimmed to the
    fields Test connection reads), for release ``ascend-dra-driver``."""
    container = {"name": "plugin", "image": "projecthami/ascend-dra-driver:latest"}
    container["command"] = ["/usr/bin/ascend-dra-kubeletplugin"]
    if args is not None:
        container["args"] = args
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ascend-dra-driver-kubeletplugin", "namespace": "ascend-dra-driver"},
        "spec": {
            "selector": {"matchLabels": {"app": "ascend-dra-driver"}},
            "template": {
                "metadata": {"labels": {"app": "ascend-dra-driver"}},
                "spec": {"containers": [container]},
            },
        },
    }


@pytest.mark.parametrize(
    ("args", "gates"),
    [
        (["--feature-gates=HAMivNPUCore=true"], {"HAMivNPUCore": True}),  # the chart's default
        (["--feature-gates=HAMivNPUCore=false"], {"HAMivNPUCore": False}),  # fullCardAndTraditionalVNPU
        (None, {"HAMivNPUCore": False}),  # the code's default (featuregates.go: alpha, off)
        (["--feature-gates=HAMivNPUCore=maybe"], None),  # the driver would not start: unknown
    ],
)
def test_the_drivers_gate_is_read_from_its_daemonset(args, gates):
    from apps.clusters.connect import ascend_dra_gates

    assert ascend_dra_gates(kubeletplugin_daemonset(args)) == gates


def test_with_the_gate_off_every_ascend_dra_pod_is_refused_and_unknown_is_no_refusal():
    off = Cluster(
        device_plugin_modes={"huawei": "ascend-dra"},
        last_check={"dra_gates": {"huawei": {"daemonset": "ns/ds", "gates": {"HAMivNPUCore": False}}}},
    )
    for cards in (allocs("huawei", ["n"], 1), shares(4096, 500)):
        with pytest.raises(ValidationFailed) as err:
            m.workload_objects(make_job(), cards, off, attempt=0)
        assert err.value.code == "dra_gate_off"
        assert "HAMivNPUCore" in err.value.message and "ns/ds" in err.value.message
    on = Cluster(
        device_plugin_modes={"huawei": "ascend-dra"},
        last_check={"dra_gates": {"huawei": {"daemonset": "ns/ds", "gates": {"HAMivNPUCore": True}}}},
    )
    assert [o["kind"] for o in m.workload_objects(make_job(), shares(4096, 500), on, attempt=0)] == [
        "ResourceClaim",
        "Job",
    ]


@pytest.mark.django_db
def test_test_connection_reads_the_gate_and_a_job_is_then_refused_with_the_reason(
    server, tmp_path, secrets_dir, a310p3, member_project
):
    from kubernetes import client as k8s

    from apps.clusters.connect import cluster_connection_test

    cluster = ascend_cluster(server, tmp_path, a310p3)
    publish(server)
    api = backend_for(cluster)
    try:
        k8s.CoreV1Api(api.api_client).create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ascend-dra-driver"}}
        )
        k8s.AppsV1Api(api.api_client).create_namespaced_daemon_set(
            "ascend-dra-driver", kubeletplugin_daemonset(["--feature-gates=HAMivNPUCore=false"])
        )
    finally:
        api.close()
    user, project = member_project
    result = cluster_connection_test(cluster=cluster, actor=user)
    assert result["dra_gates"]["huawei"] == {
        "daemonset": "ascend-dra-driver/ascend-dra-driver-kubeletplugin",
        "gates": {"HAMivNPUCore": False},
    }
    job = submit_whole_cards(project, user, a310p3, 1, name="train", image="x:1")
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    assert "HAMivNPUCore" in job.state_reason
    assert server.objects("ResourceClaim") == []
