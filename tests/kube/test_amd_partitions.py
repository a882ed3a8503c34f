"""AMD Instinct partitions (MI300X DPX / QPX / CPX × NPS1 / NPS4) through the AMD GPU DRA driver.

What the driver does, read from its source (ROCm/k8s-gpu-dra-driver @
2622427226d5ac361c3588284f4815e0dae11eaa, not run here): a card in SPX is one ``type: amdgpu``
device with its ``pciAddr``; a card in another mode is published as its partitions only, each a
``type: amdgpu-partition`` device carrying its card's address as ``parentPciAddr`` and the mode as
``partitionProfile`` ("dpx_nps1"), held exclusively by one claim (no counters at that commit;
cmd/gpu-kubeletplugin/discovery.go, deviceinfo.go). The real slices: fixtures/dra/SOURCES.md.

KEP-4815 counters (``sharedCounters`` / ``consumesCounters``) are the Kubernetes allocator's rule,
which the fake models as the API reference defines it; the AMD counter slice is filled to that
shape (the driver's counters exist only in its open pull request #88, whose names we cannot read).
"""

from __future__ import annotations

import copy
from decimal import Decimal

import kubernetes_validate
import pytest
from kubernetes import client as k8s

from apps.catalog import partitions
from apps.catalog.models import ComputeTemplate
from apps.clusters import manifests as m
from apps.clusters.connections import backend_for
from apps.clusters.sync import cluster_sync
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Device, DeviceEvent
from apps.jobs.models import Allocation
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.push import push_job_run
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures import jobs as jobs_fixtures
from tests.kube import test_dra_real_slices as real
from tests.kube.fake_apiserver import dra_sample
from tests.kube.validation import assert_strict_valid

pytestmark = pytest.mark.django_db

mi300x = real.mi300x
secrets_dir = real.secrets_dir  # autouse: the kubeconfigs under tmp_path are in the secrets directory
cluster_on, device_drift, ledger_node = real.cluster_on, real.device_drift, real.ledger_node

AMD = "gpu.amd.com"
NODE = "gpu-operator-2"  # the node of the real sample (pull request #21)
CARD_PCI = "0003:00:01.0"  # its parentPciAddr
OTHER_PCI = "0003:00:02.0"  # a second card of the same node (FILLED, like the sample's own)
ATTRS = f'device.attributes["{AMD}"]'


def dpx_slice() -> dict:
    return dra_sample("amd-dpx-partitions-resourceslice")


def second_card(devices: list[dict], pci: str, first_card_index: int) -> list[dict]:
    """The same card's partitions at another address (FILLED: names, indices, parent address and
    parentDeviceID), as the driver publishes every partitioned card."""
    out = []
    for i, dev in enumerate(copy.deepcopy(devices)):
        card = first_card_index + 8 * i
        dev["name"] = f"gpu-{card}-{card + 128}"
        dev["attributes"]["cardIndex"] = {"int": card}
        dev["attributes"]["renderIndex"] = {"int": card + 128}
        dev["attributes"]["parentPciAddr"] = {"string": pci}
        dev["attributes"]["parentDeviceID"] = {"string": "1234567890123456789"}
        out.append(dev)
    return out


@pytest.fixture
def dpx_template(mi300x):
    profile = partitions.partition_profile(mi300x, "dpx_nps1")
    return ComputeTemplate.objects.create(
        device_model=mi300x,
        name="MI300X DPX partition",
        slug="mi300x-dpx-nps1",
        memory_mib=profile.memory_mib,
        compute_share=profile.compute_share,
        isolation="hard",
        partition_profile="dpx_nps1",
        max_instances=profile.default_instances,
    )


# -- the catalog --------------------------------------------------------------------------------


def test_mi300x_profiles_follow_amd_and_the_kernel(mi300x):
    """Partitions per card from amdsmi (DPX 2, QPX 4, CPX 8); the memory modes each compute mode
    allows on MI300X from amdgpu's aqua_vanjaram.c (no DPX in NPS4, no TPX with 8 XCDs); SPX is a
    whole card, not a profile (the driver publishes it as ``type: amdgpu``)."""
    assert partitions.known_profile_names(mi300x) == [
        "dpx_nps1",
        "qpx_nps1",
        "qpx_nps4",
        "cpx_nps1",
        "cpx_nps4",
    ]
    cpx = partitions.partition_profile(mi300x, "cpx_nps4")
    assert (cpx.kind, cpx.max_instances, cpx.compute_share, cpx.memory_mib) == (
        partitions.AMD_PARTITION,
        8,
        Decimal("12.50"),
        24 * 1024,
    )
    dpx = partitions.partition_profile(mi300x, "dpx_nps1")
    # 96 GiB nominal; the driver publishes KFD's 98296Mi for the same partition (the real slice)
    assert dpx.memory_mib == 98304 and dpx.default_instances == 2
    (real,) = dra_sample("amd-partition-resourceslice")["spec"]["devices"]
    assert real["attributes"]["partitionProfile"]["string"] == "dpx_nps1"
    for name in ("spx_nps1", "dpx_nps4", "tpx_nps1", "CPX_NPS4"):
        with pytest.raises(partitions.ProfileError, match="has no partition profile"):
            partitions.partition_profile(mi300x, name)


def test_unknown_memory_stays_unknown(mi300x):
    mi300x.memory_mib = None
    assert partitions.partition_profile(mi300x, "qpx_nps4").memory_mib is None


def test_a_template_must_agree_with_the_profile(mi300x):
    from django.core.exceptions import ValidationError

    template = ComputeTemplate(
        device_model=mi300x,
        name="wrong",
        slug="wrong",
        memory_mib=48 * 1024,
        compute_share=Decimal("50.00"),
        isolation="hard",
        partition_profile="dpx_nps1",
        max_instances=2,
    )
    with pytest.raises(ValidationError) as err:
        template.clean()
    assert "memory_mib" in err.value.message_dict
    assert template.partition_type == partitions.AMD_PARTITION


# -- the fixtures and the fake's counters ---------------------------------------------------------


def test_the_partition_fixtures_are_valid_slices(server):
    dpx = dpx_slice()
    assert_strict_valid(dpx)
    server.add_node(NODE)
    server.publish_resource_slice(dpx)  # the fake's own create check
    names = {d["name"] for d in dpx["spec"]["devices"]}
    assert names == {"gpu-32-160", "gpu-40-168"}
    assert {d["attributes"]["type"]["string"] for d in dpx["spec"]["devices"]} == {"amdgpu-partition"}
    assert {d["attributes"]["parentPciAddr"]["string"] for d in dpx["spec"]["devices"]} == {CARD_PCI}
    counters = dra_sample("amd-partition-counters-resourceslice")
    for version in ("1.35.0", "1.36.0"):  # sharedCounters in resource.k8s.io/v1
        assert kubernetes_validate.validate(counters, version, strict=True) == version.rsplit(".", 1)[0]
    server.publish_resource_slice(counters)


def test_a_slice_with_devices_and_counters_is_refused(server):
    both = dra_sample("amd-partition-counters-resourceslice")
    both["spec"]["devices"] = dpx_slice()["spec"]["devices"]
    with pytest.raises(ValueError, match="only one of devices and sharedCounters"):
        server.publish_resource_slice(both)
    bad = dra_sample("amd-partition-counters-resourceslice")
    bad["spec"]["sharedCounters"][0]["counters"] = {}
    with pytest.raises(ValueError, match=r"sharedCounters\[0\]\.counters"):
        server.publish_resource_slice(bad)


def counter_pool(server) -> None:
    """The counter slice and a devices slice of the same pool (FILLED consumesCounters, see the
    fixture's header): two DPX partitions consuming 4 XCDs each, a whole card consuming all 8."""
    counters = dra_sample("amd-partition-counters-resourceslice")
    devices = dpx_slice()
    devices["metadata"]["name"] = f"{NODE}-{AMD}-devices"
    devices["spec"]["pool"]["resourceSliceCount"] = 2
    use = {"counterSet": "gpu-0003-00-01-0", "counters": {"xcds": {"value": "4"}}}
    for dev in devices["spec"]["devices"]:
        dev["consumesCounters"] = [copy.deepcopy(use)]
    whole = copy.deepcopy(devices["spec"]["devices"][0])
    whole["name"] = "gpu-0003-00-01-0-spx"
    attrs = whole["attributes"]
    for key in ("parentPciAddr", "parentDeviceID"):
        attrs.pop(key)
    attrs.update(
        type={"string": "amdgpu"}, pciAddr={"string": CARD_PCI}, partitionProfile={"string": "spx_nps1"}
    )
    whole["consumesCounters"] = [{"counterSet": "gpu-0003-00-01-0", "counters": {"xcds": {"value": "8"}}}]
    devices["spec"]["devices"].append(whole)
    server.add_node(NODE)
    server.publish_resource_slice(counters)
    server.publish_resource_slice(devices)


class Cluster1:
    """The fake with Suanchi's gpu.amd.com DeviceClass and namespace ``p``, through the kube client."""

    def __init__(self, server, api):
        self.server, self.dra, self.core = server, k8s.ResourceV1Api(api), k8s.CoreV1Api(api)
        (cls,) = [c for c in m.device_class_manifests() if c["metadata"]["name"] == AMD]
        self.dra.create_device_class(cls)
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "p"}})

    def allocate(self, name: str, expression: str) -> str | None:
        """A claim selecting by ``expression`` and a pod using it; the device it got (None: Pending)."""
        exactly = {"deviceClassName": AMD, "selectors": [{"cel": {"expression": expression}}]}
        self.dra.create_namespaced_resource_claim(
            "p",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            },
        )
        self.core.create_namespaced_pod(
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
        self.server.advance(0)
        status = self.dra.read_namespaced_resource_claim(name, "p").status
        if status is None or status.allocation is None:
            assert self.core.read_namespaced_pod(name, "p").spec.node_name is None
            return None
        (result,) = status.allocation.devices.results
        assert self.core.read_namespaced_pod(name, "p").spec.node_name == NODE
        return result.device


PARTITION = f'{ATTRS}.type == "amdgpu-partition" && {ATTRS}.parentPciAddr == "{CARD_PCI}"'
WHOLE = f'{ATTRS}.type == "amdgpu" && {ATTRS}.pciAddr == "{CARD_PCI}"'


def test_the_fake_refuses_a_partition_once_the_cards_counters_are_used(fake_server, fake_api):
    counter_pool(fake_server)
    fake = Cluster1(fake_server, fake_api)
    # The whole card takes all 8 XCDs: both partitions are free devices, yet neither can be allocated.
    assert fake.allocate("whole", WHOLE) == "gpu-0003-00-01-0-spx"
    assert fake.allocate("part-a", PARTITION) is None


def test_the_fake_allocates_partitions_while_counters_are_left(fake_server, fake_api):
    counter_pool(fake_server)
    fake = Cluster1(fake_server, fake_api)
    first = fake.allocate("part-a", PARTITION)
    second = fake.allocate("part-b", PARTITION)
    assert {first, second} == {"gpu-32-160", "gpu-40-168"}
    # 8 of 8 XCDs used: the whole card is refused though no other claim holds that device.
    assert fake.allocate("whole", WHOLE) is None


def test_without_counters_a_partition_is_held_by_one_claim(fake_server, fake_api):
    """The driver's own model (no counters): the card's two DPX partitions, then nothing left."""
    fake_server.add_node(NODE)
    fake_server.publish_resource_slice(dpx_slice())
    fake = Cluster1(fake_server, fake_api)
    assert {fake.allocate("a", PARTITION), fake.allocate("b", PARTITION)} == {"gpu-32-160", "gpu-40-168"}
    assert fake.allocate("c", PARTITION) is None


# -- ledger → schedule → render → push → allocate ------------------------------------------------


def test_a_partition_job_gets_a_partition_of_the_ledgers_card(
    server, tmp_path, mi300x, dpx_template, member_project
):
    cluster = cluster_on(server, tmp_path, {"amd": "dra"})
    ledger_node(
        cluster,
        NODE,
        [
            {"vendor": "amd", "pci_bus_id": pci, "uuid": f"amd-{i}"}
            for i, pci in enumerate([CARD_PCI, OTHER_PCI])
        ],
        mi300x,
    )
    server.add_node(NODE)
    user, project = member_project
    jobs = [
        job_submit(
            project=project, actor=user, name=n, image="x:1", request_kind="template", template=dpx_template
        )
        for n in ("first", "second")
    ]
    assert set(scheduling_cycle_run().placed_job_ids) == {j.pk for j in jobs}
    chosen = {
        j.pk: Allocation.objects.get(job=j, released_at__isnull=True).device.pci_bus_id.lower() for j in jobs
    }
    # The slice lists the other card's partitions first: an allocator not held to the ledger's card
    # would hand those out first.
    first_card = chosen[jobs[0].pk]
    other = OTHER_PCI if first_card == CARD_PCI else CARD_PCI
    base = dpx_slice()["spec"]["devices"]
    mine = second_card(base, first_card, 48) if first_card != CARD_PCI else base
    theirs = second_card(base, other, 48) if other != CARD_PCI else base
    slice_ = dpx_slice()
    slice_["spec"]["devices"] = theirs + mine
    server.publish_resource_slice(slice_)
    assert device_drift(cluster_sync(cluster=cluster)) == []
    backend = backend_for(cluster)
    try:
        for obj in m.device_class_manifests():
            assert backend.apply(obj).action in ("created", "unchanged")
    finally:
        backend.close()
    for job in jobs:
        assert push_job_run(job_id=job.pk)["failed"] == 0
    server.advance(0)
    parent = {d["name"]: d["attributes"]["parentPciAddr"]["string"] for d in slice_["spec"]["devices"]}
    got = []
    for job in jobs:
        (claim,) = [
            c
            for c in server.objects("ResourceClaim")
            if c["metadata"]["name"].startswith(f"suanchi-{job.pk}-")
        ]
        assert_strict_valid(claim)
        (request,) = claim["spec"]["devices"]["requests"]
        (selector,) = request["exactly"]["selectors"]
        expression = selector["cel"]["expression"]
        assert f'{ATTRS}.type == "amdgpu-partition"' in expression
        assert f'{ATTRS}.partitionProfile == "dpx_nps1"' in expression
        assert f'{ATTRS}.parentPciAddr == "{chosen[job.pk]}"' in expression
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (AMD, NODE)
        assert parent[result["device"]] == chosen[job.pk]
        got.append(result["device"])
    assert len(set(got)) == 2  # two partitions, each held by one claim
    pods = [p for p in server.objects("Pod") if p["metadata"]["name"].startswith("suanchi-")]
    assert len(pods) == 2 and all(p["spec"].get("nodeName") == NODE for p in pods)


# -- cluster sync -------------------------------------------------------------------------------


def test_sync_reads_a_partitioned_card_without_drift(server, tmp_path, mi300x):
    cluster = cluster_on(server, tmp_path, {"amd": "dra"})
    # The ledger's spelling (upper case would not matter here: the sample's address has no a–f).
    ledger_node(cluster, NODE, [{"vendor": "amd", "pci_bus_id": CARD_PCI, "uuid": "amd-0"}], mi300x)
    server.add_node(NODE)
    server.publish_resource_slice(dpx_slice())
    report = cluster_sync(cluster=cluster)
    assert device_drift(report) == []
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).exists()
    assert sorted((s["node"], s["pci"]) for s in report.slices) == [
        (NODE, ""),
        (NODE, ""),
    ]  # partitions, not cards
    # Contrast: partitions of a card the ledger lacks are drift.
    slice_ = dpx_slice()
    slice_["spec"]["devices"] = second_card(slice_["spec"]["devices"], OTHER_PCI, 48)
    slice_["spec"]["pool"]["generation"] = 2
    server.publish_resource_slice(slice_)
    drift = [d["drift"].split(":")[0] for d in device_drift(cluster_sync(cluster=cluster))]
    assert "slice-device" in drift and "ledger-device" in drift


# -- refusals -----------------------------------------------------------------------------------


def amd_allocation(**fields) -> Allocation:
    card = Device(vendor="amd", index=0, pci_bus_id=CARD_PCI)
    defaults = {"whole_card": False, "memory_mib": 98304, "compute_milli": 500, "isolation": "hard"}
    return Allocation(device=card, **{**defaults, **fields})


def test_an_amd_fraction_without_a_partition_profile_is_still_refused():
    cluster = Cluster(name="c", slug="c", device_plugin_modes={"amd": "dra"})
    with pytest.raises(ValidationFailed) as err:
        m.replica_resources([amd_allocation(partition_profile="")], cluster)
    assert err.value.code == "fraction_not_shareable"
    assert "whole card billed as a slice" in err.value.message
    assert "partition template" in err.value.message


@pytest.mark.parametrize("mode", ["plain", "hami"])
def test_an_amd_partition_outside_dra_is_refused_with_the_reason(mode):
    cluster = Cluster(name="c", slug="c", device_plugin_modes={"amd": mode})
    with pytest.raises(ValidationFailed) as err:
        m.replica_resources([amd_allocation(partition_profile="cpx_nps4")], cluster)
    assert err.value.code == "fraction_not_shareable"
    assert "cpx_nps4" in err.value.message and "gpu.amd.com" in err.value.message
    assert f"{mode} device-plugin mode" in err.value.message


def test_an_amd_partition_in_dra_mode_asks_for_no_extended_resource():
    cluster = Cluster(name="c", slug="c", device_plugin_modes={"amd": "dra"})
    limits, _hami, notes = m.replica_resources([amd_allocation(partition_profile="cpx_nps4")], cluster)
    assert limits == {} and notes == []


# -- the card's mode, as cluster sync learned it ---------------------------------------------------


def learned(server, tmp_path, mi300x) -> Device:
    cluster = cluster_on(server, tmp_path, {"amd": "dra"})
    ledger_node(cluster, NODE, [{"vendor": "amd", "pci_bus_id": CARD_PCI, "uuid": "amd-0"}], mi300x)
    server.add_node(NODE)
    server.publish_resource_slice(dpx_slice())
    cluster_sync(cluster=cluster)
    return Device.objects.get(uuid="amd-0")


def test_sync_learns_the_cards_mode(server, tmp_path, mi300x):
    card = learned(server, tmp_path, mi300x)
    assert card.dra_mig_devices == [
        {"device": "gpu-32-160", "type": "amdgpu-partition", "profile": "dpx_nps1"},
        {"device": "gpu-40-168", "type": "amdgpu-partition", "profile": "dpx_nps1"},
    ]
    event = DeviceEvent.objects.get(device=card, kind=DeviceEvent.Kind.UPDATED)
    assert "gpu-32-160 amdgpu-partition dpx_nps1" in event.message
    cluster_sync(cluster=card.node.cluster)  # unchanged: no second event
    assert DeviceEvent.objects.filter(device=card, kind=DeviceEvent.Kind.UPDATED).count() == 1


def test_a_claim_for_a_mode_the_card_is_not_in_is_refused(server, tmp_path, mi300x):
    card = learned(server, tmp_path, mi300x)
    cluster = card.node.cluster

    def render(**fields):
        allocation = Allocation(device=card, node=card.node, **fields)
        return m.replica_resources([allocation], cluster)

    assert (
        render(whole_card=False, partition_profile="dpx_nps1", memory_mib=98304, compute_milli=500)[0] == {}
    )
    with pytest.raises(ValidationFailed) as err:
        render(whole_card=False, partition_profile="cpx_nps4", memory_mib=24576, compute_milli=125)
    assert err.value.code == "amd_partition_mode"
    assert "runs in dpx_nps1" in err.value.message and "no cpx_nps4 partition" in err.value.message
    with pytest.raises(ValidationFailed) as err:
        render(whole_card=True, partition_profile="", memory_mib=196608, compute_milli=1000)
    assert "is partitioned (dpx_nps1)" in err.value.message
    # A card nothing was learned of: no guess, rendered as asked.
    card.dra_mig_devices = []
    assert (
        render(whole_card=False, partition_profile="cpx_nps4", memory_mib=24576, compute_milli=125)[0] == {}
    )


def test_sync_reads_a_counter_slice_of_the_pool_without_drift(server, tmp_path, mi300x):
    """A pool's counter slice has no devices: nothing to match, nothing reported as drift."""
    cluster = cluster_on(server, tmp_path, {"amd": "dra"})
    ledger_node(cluster, NODE, [{"vendor": "amd", "pci_bus_id": CARD_PCI, "uuid": "amd-0"}], mi300x)
    counter_pool(server)
    report = cluster_sync(cluster=cluster)
    assert device_drift(report) == []
    assert len(report.slices) == 3  # two partitions and the whole-card device of the devices slice


def test_a_job_for_another_mode_stays_queued_with_the_reason(server, tmp_path, mi300x, member_project):
    """The scheduling cycle renders a placement before it keeps it: a claim no device of the card
    would match leaves the job pending with the reason, and nothing is pushed."""
    card = learned(server, tmp_path, mi300x)
    profile = partitions.partition_profile(mi300x, "cpx_nps4")
    cpx = ComputeTemplate.objects.create(
        device_model=mi300x,
        name="MI300X CPX partition",
        slug="mi300x-cpx-nps4",
        memory_mib=profile.memory_mib,
        compute_share=profile.compute_share,
        isolation="hard",
        partition_profile="cpx_nps4",
        max_instances=profile.default_instances,
    )
    user, project = member_project
    job = job_submit(
        project=project, actor=user, name="cpx", image="x:1", request_kind="template", template=cpx
    )
    assert job.pk not in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    assert "runs in dpx_nps1" in job.state_reason and "no cpx_nps4 partition" in job.state_reason
    assert not Allocation.objects.filter(device=card, released_at__isnull=True).exists()
    assert server.objects("ResourceClaim") == []


def test_a_whole_card_job_on_a_partitioned_card_stays_queued_with_the_reason(
    server, tmp_path, mi300x, member_project
):
    card = learned(server, tmp_path, mi300x)
    user, project = member_project
    whole = jobs_fixtures.submit_whole_cards(project, user, mi300x, 1, name="whole", image="x:1")
    assert whole.pk not in scheduling_cycle_run().placed_job_ids
    whole.refresh_from_db()
    assert "is partitioned (dpx_nps1)" in whole.state_reason
    assert not Allocation.objects.filter(device=card, released_at__isnull=True).exists()
