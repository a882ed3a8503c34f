"""A fraction of a card is rendered in the sharing mode the cluster's plugin has for its vendor (HAMi's
names for Hygon and Cambricon, read from Project-HAMi/HAMi: see ``apps/clusters/sharing.py``), or it
is refused with the reason — never a whole card billed as a slice (issue 28 "Sharing never lies")."""

from __future__ import annotations

import pytest

from apps.clusters import manifests as m
from apps.clusters import sharing
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster
from tests.kube.test_manifests import allocs, container, limits, make_job, validate


def pod_annotations(obj: dict) -> dict[str, str]:
    return obj["spec"]["template"]["metadata"]["annotations"]


def fraction(vendor: str, *, memory: int, milli: int, count: int = 1):
    result = allocs(vendor, ["node-01"], count, memory=memory, milli=milli)
    for a in result:
        a.whole_card = False
    return result


def test_a_hygon_fraction_under_hami_asks_for_a_vdcu_with_mib_and_percent_and_pins_the_card():
    job = make_job()
    obj = m.job_manifest(
        job,
        fraction("hygon", memory=2000, milli=600),
        Cluster(device_plugin_modes={"hygon": "hami"}),
        attempt=0,
    )
    validate(obj)
    # examples/hygon/default_use.yaml: dcunum 1, dcucores 60 (percent), dcumem 2000 (MiB)
    assert limits(obj) == {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "60"}
    assert pod_annotations(obj)["hygon.com/use-gpuuuid"] == "HYGON-node-01-0"
    assert "nvidia.com/use-gpuuuid" not in pod_annotations(obj)


def test_a_cambricon_fraction_under_hami_counts_memory_in_256_mib_units_rounded_up():
    obj = m.job_manifest(
        make_job(),
        fraction("cambricon", memory=5000, milli=250),
        Cluster(device_plugin_modes={"cambricon": "hami"}),
        attempt=0,
    )
    validate(obj)
    # pkg/device/cambricon/device.go: MemoryFactor 256 (MiB per vmemory unit); 5000 MiB → 20 units.
    assert limits(obj) == {
        "cambricon.com/vmlu": "1",
        "cambricon.com/mlu.smlu.vmemory": "20",
        "cambricon.com/mlu.smlu.vcore": "25",
    }
    assert pod_annotations(obj)["cambricon.com/use-gpuuuid"] == "CAMBRICON-node-01-0"


@pytest.mark.parametrize(
    ("vendor", "mode", "says"),
    [
        ("hygon", "plain", "hami"),
        ("cambricon", "plain", "hami"),
        ("amd", "dra", "whole cards"),
        ("amd", "plain", "whole cards"),
        ("huawei", "plain", "ascend-dra"),
        ("huawei", "ascend-vnpu", "ascend-dra"),
    ],
)
def test_a_fraction_no_mode_of_the_cluster_can_share_is_refused_with_the_options(vendor, mode, says):
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(
            make_job(),
            fraction(vendor, memory=4096, milli=500),
            Cluster(device_plugin_modes={vendor: mode}),
            attempt=0,
        )
    assert err.value.code == "fraction_not_shareable"
    assert vendor in err.value.message and says in err.value.message
    assert err.value.message == sharing.fraction_refusal(vendor, mode)


def test_whole_cards_of_those_vendors_are_still_rendered_as_counts():
    obj = m.job_manifest(make_job(), allocs("hygon", ["node-01"], 2), Cluster(), attempt=0)
    validate(obj)
    assert limits(obj)["hygon.com/dcu"] == "2"


def test_nvidia_fractions_keep_their_rendering_in_every_mode():
    for mode in ("plain", "mig-single", "mig-mixed", "hami"):
        assert sharing.fraction_refusal("nvidia", mode) == ""
    obj = m.job_manifest(
        make_job(),
        fraction("nvidia", memory=20480, milli=500),
        Cluster(device_plugin_modes={"nvidia": "hami"}),
        attempt=0,
    )
    validate(obj)
    assert limits(obj) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "50"}
    assert pod_annotations(obj)[m.HAMI_UUID_ANNOTATION] == "NVIDIA-node-01-0"


def test_a_new_vendor_renders_hamis_documented_count_or_is_refused_where_there_is_none():
    obj = m.job_manifest(make_job(), allocs("metax", ["node-01"], 1), Cluster(), attempt=0)
    validate(obj)
    assert container(obj)["resources"]["limits"] == {"metax-tech.com/gpu": "1"}
    # Iluvatar's own ix-device-plugin advertises whole cards as iluvatar.com/gpu (its adapter).
    obj = m.job_manifest(make_job(), allocs("iluvatar", ["node-01"], 1), Cluster(), attempt=0)
    assert container(obj)["resources"]["limits"] == {"iluvatar.com/gpu": "1"}
    with pytest.raises(ValidationFailed) as err:
        m.job_manifest(make_job(), allocs("intel", ["node-01"], 1), Cluster(), attempt=0)
    assert err.value.code == "no_resource_name" and "intel" in err.value.message


def test_compute_units_on_a_vendor_no_mode_can_share_round_up_to_a_whole_card(fleet_with_amd):
    from decimal import Decimal

    from apps.scheduling.resource_requests import _cu_alternatives

    job = make_job(request_kind="compute_units", compute_units=Decimal("0.3"), memory_mib=1024)
    by_vendor = {
        group_models: group
        for group, _granted in _cu_alternatives(job, fleet_with_amd["models"], fleet_with_amd["coefficients"])
        for group_models in group.models
    }
    assert by_vendor["MI210"].whole is True  # AMD: no sharing mode → the whole card, never a 30 % slice
    assert by_vendor["A100"].whole is False  # NVIDIA: a slice, rendered by its plugin's sharing


@pytest.fixture
def fleet_with_amd():
    from decimal import Decimal

    from apps.catalog.models import DeviceModel

    models = [
        DeviceModel(pk=1, vendor="amd", kind="gpu", name="MI210", slug="mi210", memory_mib=65536),
        DeviceModel(pk=2, vendor="nvidia", kind="gpu", name="A100", slug="a100", memory_mib=81920),
    ]
    return {"models": models, "coefficients": {1: Decimal("1.0"), 2: Decimal("1.0")}}
