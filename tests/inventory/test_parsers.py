"""Vendor adapters, the registry and what every parser does (no database); each vendor's parsers
have their own file (test_parsers_<vendor>.py)."""

from __future__ import annotations

import json
import re

import pytest

from apps.core.errors import ParseFailed, ValidationFailed
from apps.inventory.vendors import (
    ADAPTERS,
    PARSERS,
    VendorAdapter,
    adapter_for_kind,
    get_adapter,
    parse_report,
)
from tests.inventory.parsing import fixture

REPORT_KINDS = {
    "nvidia-smi-xml",
    "nvidia-smi-csv",
    "nvidia-topo",
    "npu-smi",
    "rocm-smi-json",
    "hy-smi",
    # issue 19 item 3
    "cnmon",
    "cnmon-info",
    "npu-smi-topo",
    "rocm-smi-topo",
    "hy-smi-topo",
    "nvidia-smi-mig-lgip",
    "nvidia-smi-mig-lgipp",
    # issue 28: MetaX, Iluvatar, Kunlunxin, Enflame
    "mx-smi",
    "ixsmi",
    "xpu-smi",
    "efsmi",
    "mthreads-gmi",  # Moore Threads
}


# ===================================================================================================
# Registry
# ===================================================================================================


def test_the_registry_has_one_adapter_per_vendor_slug():
    assert set(ADAPTERS) == {
        "nvidia",
        "amd",
        "huawei",
        "hygon",
        "cambricon",
        "metax",
        "iluvatar",
        "kunlunxin",
        "enflame",
        "mthreads",
    }
    for slug, adapter in ADAPTERS.items():
        assert isinstance(adapter, VendorAdapter)
        assert adapter.vendor == slug


def test_get_adapter_returns_the_registered_adapter():
    assert get_adapter("huawei") is ADAPTERS["huawei"]


def test_get_adapter_names_the_known_vendors_when_the_slug_is_unknown():
    with pytest.raises(ValidationFailed) as caught:
        get_adapter("intel")
    assert "intel" in caught.value.message
    assert "nvidia" in caught.value.message
    assert caught.value.details["known"] == sorted(ADAPTERS)


def test_parsers_cover_every_node_report_kind():
    assert set(PARSERS) == REPORT_KINDS


def test_every_report_kind_belongs_to_exactly_one_adapter():
    owners = {kind: [a.vendor for a in ADAPTERS.values() if kind in a.report_kinds] for kind in REPORT_KINDS}
    assert owners == {
        "nvidia-smi-xml": ["nvidia"],
        "nvidia-smi-csv": ["nvidia"],
        "nvidia-topo": ["nvidia"],
        "npu-smi": ["huawei"],
        "rocm-smi-json": ["amd"],
        "hy-smi": ["hygon"],
        "cnmon": ["cambricon"],
        "cnmon-info": ["cambricon"],
        "npu-smi-topo": ["huawei"],
        "rocm-smi-topo": ["amd"],
        "hy-smi-topo": ["hygon"],
        "nvidia-smi-mig-lgip": ["nvidia"],
        "nvidia-smi-mig-lgipp": ["nvidia"],
        "mx-smi": ["metax"],
        "ixsmi": ["iluvatar"],
        "xpu-smi": ["kunlunxin"],
        "efsmi": ["enflame"],
        "mthreads-gmi": ["mthreads"],
    }
    assert adapter_for_kind("npu-smi") is ADAPTERS["huawei"]
    assert adapter_for_kind("mx-smi") is ADAPTERS["metax"]


def test_parse_report_dispatches_on_the_kind():
    report = parse_report("hy-smi", fixture("hy_smi_dcu.txt"))
    assert report.vendor == "hygon"
    assert report.kind == "hy-smi"


def test_parse_report_rejects_an_unknown_kind_listing_the_valid_ones():
    with pytest.raises(ParseFailed) as caught:
        parse_report("dmesg", "whatever")
    for kind in REPORT_KINDS:
        assert kind in caught.value.message
    assert caught.value.details["valid_kinds"] == sorted(REPORT_KINDS)
    assert caught.value.code == "parse_error"


def test_parse_report_accepts_utf8_bytes():
    report = parse_report("nvidia-smi-csv", fixture("nvidia_smi_query_header.csv").encode())
    assert len(report.devices) == 4


@pytest.mark.parametrize("kind", sorted(REPORT_KINDS))
def test_every_parser_rejects_empty_input(kind):
    with pytest.raises(ParseFailed):
        parse_report(kind, "   \n")


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("nvidia-smi-xml", "nvidia_smi_q_a100_mig.xml"),
        ("nvidia-smi-xml", "nvidia_smi_q_t4_na.xml"),
        ("nvidia-smi-csv", "nvidia_smi_query_header.csv"),
        ("nvidia-smi-csv", "nvidia_smi_query_noheader_nounits.csv"),
        ("nvidia-topo", "nvidia_topo_h100_8gpu_nics.txt"),
        ("nvidia-topo", "nvidia_topo_a100_pcie_old_driver.txt"),
        ("nvidia-topo", "nvidia_topo_gh200_1gpu.txt"),
        ("npu-smi", "npu_smi_910b3_8chip.txt"),
        ("npu-smi", "npu_smi_a3_phy_id.txt"),
        ("npu-smi", "npu_smi_310p_duo.txt"),
        ("rocm-smi-json", "rocm_smi_mi210_xgmi.json"),
        ("hy-smi", "hy_smi_dcu.txt"),
        ("hy-smi", "hy_smi_hcu.txt"),
    ],
)
def test_every_fixture_parses_into_a_json_serialisable_report_with_all_node_keys(kind, name):
    report = parse_report(kind, fixture(name))
    body = report.as_dict()
    json.dumps(body)
    assert set(body["node"]) >= {
        "driver_version",
        "cuda_version",
        "cann_version",
        "rocm_version",
        "dtk_version",
    }
    assert body["kind"] == kind
    assert report.devices
    indices = [d.index for d in report.devices]
    assert indices == sorted(set(indices))
    for link in report.links:
        assert link.a < link.b


# ===================================================================================================
# Adapters
# ===================================================================================================


@pytest.mark.parametrize(
    ("vendor", "resource", "env", "kind"),
    [
        ("nvidia", "nvidia.com/gpu", "NVIDIA_VISIBLE_DEVICES", "gpu"),
        ("huawei", "huawei.com/Ascend910", "ASCEND_VISIBLE_DEVICES", "npu"),
        ("amd", "amd.com/gpu", "HIP_VISIBLE_DEVICES", "gpu"),
        ("hygon", "hygon.com/dcu", "HIP_VISIBLE_DEVICES", "dcu"),
        ("cambricon", "cambricon.com/mlu", "MLU_VISIBLE_DEVICES", "mlu"),
    ],
)
def test_adapters_name_their_resource_visible_devices_env_and_device_kind(vendor, resource, env, kind):
    adapter = get_adapter(vendor)
    assert adapter.resource_name == resource
    assert adapter.visible_devices_env == env
    assert adapter.device_kind == kind
    assert adapter.display_name


@pytest.mark.parametrize(
    ("vendor", "model", "expected"),
    [
        ("nvidia", "A100", {"accelerator": "nvidia-gpu", "gpu-brand": "nvidia", "gpu-model": "A100"}),
        ("huawei", "910B", {"accelerator": "huawei-npu", "gpu-brand": "huawei", "npu-model": "910b"}),
        ("hygon", "Z100L", {"accelerator": "hygon-dcu", "gpu-brand": "hygon", "dcu-model": "Z100L"}),
        ("amd", "MI210", {"accelerator": "amd-gpu", "gpu-brand": "amd", "gpu-model": "MI210"}),
        (
            "cambricon",
            "MLU370-X8",
            {"accelerator": "cambricon-mlu", "gpu-brand": "cambricon", "mlu-model": "MLU370-X8"},
        ),
    ],
)
def test_node_labels_follow_seed_004(vendor, model, expected):
    assert get_adapter(vendor).node_labels(model) == expected


def test_node_labels_turn_raw_product_names_into_valid_label_values():
    nvidia, amd = get_adapter("nvidia"), get_adapter("amd")
    assert nvidia.node_labels("NVIDIA A100-SXM4-80GB")["gpu-model"] == "A100-SXM4-80GB"
    assert nvidia.node_labels("NVIDIA H100 80GB HBM3")["gpu-model"] == "H100-80GB-HBM3"
    value = amd.node_labels("Aldebaran/MI200 [Instinct MI210]")["gpu-model"]
    assert value == "Aldebaran-MI200-Instinct-MI210"
    long_value = nvidia.node_labels("X" * 100 + " GPU")["gpu-model"]
    assert len(long_value) <= 63
    assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", long_value)


def test_node_labels_leave_out_the_model_when_it_is_unknown():
    assert get_adapter("hygon").node_labels(None) == {"accelerator": "hygon-dcu", "gpu-brand": "hygon"}
    assert "npu-model" not in get_adapter("huawei").node_labels("  ")


@pytest.mark.parametrize("vendor", ["nvidia", "huawei", "amd", "hygon", "cambricon"])
def test_taints_are_accelerator_no_schedule(vendor):
    adapter = get_adapter(vendor)
    assert adapter.taints() == [
        {"key": "accelerator", "value": adapter.accelerator_label, "effect": "NoSchedule"}
    ]


def test_the_ascend_taint_matches_seed_004():
    assert get_adapter("huawei").taints() == [
        {"key": "accelerator", "value": "huawei-npu", "effect": "NoSchedule"}
    ]


def test_the_nvidia_taint_is_marked_optional_but_on_by_default():
    nvidia = get_adapter("nvidia")
    assert nvidia.taint_optional is True
    assert nvidia.taints() == [{"key": "accelerator", "value": "nvidia-gpu", "effect": "NoSchedule"}]
    assert get_adapter("huawei").taint_optional is False


def test_only_ascend_mounts_the_driver_read_only_from_the_host():
    mounts = get_adapter("huawei").mounts()
    assert mounts == [
        {
            "name": "ascend-driver",
            "hostPath": "/usr/local/Ascend/driver",
            "mountPath": "/usr/local/Ascend/driver",
            "readOnly": True,
        }
    ]
    mounts[0]["readOnly"] = False
    assert get_adapter("huawei").driver_mounts[0]["readOnly"] is True
    for vendor in ("nvidia", "amd", "hygon", "cambricon"):
        assert get_adapter(vendor).mounts() == []


def test_report_kinds_list_the_parsers_of_each_vendor():
    assert get_adapter("nvidia").report_kinds == (
        "nvidia-smi-xml",
        "nvidia-smi-csv",
        "nvidia-topo",
        "nvidia-smi-mig-lgip",
        "nvidia-smi-mig-lgipp",
    )
    assert get_adapter("huawei").report_kinds == ("npu-smi", "npu-smi-topo")
    assert get_adapter("amd").report_kinds == ("rocm-smi-json", "rocm-smi-topo")
    assert get_adapter("hygon").report_kinds == ("hy-smi", "hy-smi-topo")
    assert get_adapter("cambricon").report_kinds == ("cnmon", "cnmon-info")
