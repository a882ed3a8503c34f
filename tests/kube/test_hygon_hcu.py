"""Hygon HCU under its DRA driver (dra.hygon.com), on the driver's own device shape
(fixtures/dra/hygon-hcu-resourceslice.yaml, sources in fixtures/dra/SOURCES.md): a whole-card claim
pinned by the card's published ``uuid`` attribute is allocated exactly that card by the fake's
allocator, and the objects are strict-valid for Kubernetes 1.34-1.36."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from kubernetes import client as k8s

from tests.kube.fake_apiserver import dra_sample

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
