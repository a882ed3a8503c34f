"""Vendor adapters, the registry and the SMI output parsers (no database)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from apps.core.errors import ParseFailed, ValidationFailed
from apps.inventory.vendors import (
    ADAPTERS,
    AGENT_QUERY_FIELDS,
    PARSERS,
    ParsedLink,
    VendorAdapter,
    adapter_for_kind,
    get_adapter,
    parse_report,
)
from apps.inventory.vendors.amd import parse_rocm_smi_json
from apps.inventory.vendors.huawei import parse_npu_smi
from apps.inventory.vendors.hygon import parse_hy_smi
from apps.inventory.vendors.nvidia import parse_nvidia_smi_csv, parse_nvidia_smi_xml, parse_nvidia_topo

FIXTURES = Path(__file__).parent / "fixtures"

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


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def replace_once(text: str, old: str, new: str) -> str:
    assert old in text, f"{old!r} not in fixture"
    return text.replace(old, new, 1)


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line containing ``needle``."""
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in text")


def parse_error(parser, text: str) -> ParseFailed:
    with pytest.raises(ParseFailed) as caught:
        parser(text)
    return caught.value


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


# ===================================================================================================
# nvidia-smi -q -x
# ===================================================================================================


def test_it_reads_driver_and_cuda_versions_from_the_xml_log():
    report = parse_nvidia_smi_xml(fixture("nvidia_smi_q_a100_mig.xml"))
    assert report.vendor == "nvidia"
    assert report.node["driver_version"] == "535.161.08"
    assert report.node["cuda_version"] == "12.2"
    assert report.full_inventory is True
    assert report.warnings == []


def test_it_reads_identity_and_telemetry_of_each_gpu_element():
    first, second = parse_nvidia_smi_xml(fixture("nvidia_smi_q_a100_mig.xml")).devices
    assert first.index == 0
    assert first.uuid == "GPU-4f6c2a1e-93b7-4d0e-8a51-2c7e9b0d3f18"
    assert first.serial == "1323521042817"
    assert first.model_name == "NVIDIA A100-SXM4-80GB"
    assert first.firmware_version == "92.00.45.00.03"
    assert first.pci_bus_id == "0000:1A:00.0"
    assert first.pci_device_id == "0x20B2"
    assert first.memory_mib == 81920
    assert first.memory_used_mib == 25
    assert first.temperature_c == 33.0
    assert first.power_w == 71.42
    assert first.health == "healthy"
    assert first.numa_node is None
    assert first.extra["power_limit_w"] == 400.0
    assert second.index == 1
    assert second.utilization_pct == 87.0
    assert second.memory_used_mib == 61432


def test_it_collects_mig_instances_of_a_mig_enabled_gpu():
    first, second = parse_nvidia_smi_xml(fixture("nvidia_smi_q_a100_mig.xml")).devices
    assert first.mig_enabled is True
    assert [(p["gi_id"], p["ci_id"], p["memory_mib"], p["sm_count"]) for p in first.partitions] == [
        (2, 0, 40192, 42),
        (3, 0, 19968, 28),
        (9, 0, 9728, 14),
    ]
    assert all(p["profile"] is None for p in first.partitions)
    assert first.utilization_pct is None  # N/A while MIG is on
    assert second.mig_enabled is False
    assert second.partitions == []


def test_it_keeps_a_mig_profile_when_the_log_names_one():
    text = replace_once(
        fixture("nvidia_smi_q_a100_mig.xml"),
        "<gpu_instance_id>2</gpu_instance_id>",
        "<gpu_instance_id>2</gpu_instance_id>\n<profile>3g.40gb</profile>",
    )
    assert parse_nvidia_smi_xml(text).devices[0].partitions[0]["profile"] == "3g.40gb"


def test_it_turns_na_fields_into_none():
    first, _ = parse_nvidia_smi_xml(fixture("nvidia_smi_q_t4_na.xml")).devices
    assert first.serial is None
    assert first.utilization_pct is None
    assert first.temperature_c is None
    assert first.power_w is None  # "[N/A]"
    assert first.mig_enabled is None
    assert first.extra["ecc_mode"] is None


def test_it_falls_back_to_the_position_when_minor_number_is_na():
    first, second = parse_nvidia_smi_xml(fixture("nvidia_smi_q_t4_na.xml")).devices
    assert first.index == 0
    assert first.extra["minor_number"] is None
    assert second.index == 1


def test_it_reads_power_from_older_power_readings():
    _, second = parse_nvidia_smi_xml(fixture("nvidia_smi_q_t4_na.xml")).devices
    assert second.power_w == 48.17
    assert second.extra["power_limit_w"] == 70.0


def test_it_reads_average_power_draw_of_the_v13_dtd():
    text = fixture("nvidia_smi_q_a100_mig.xml").replace(
        "<power_draw>71.42 W</power_draw>",
        "<average_power_draw>70.10 W</average_power_draw>\n<instant_power_draw>72.00 W</instant_power_draw>",
    )
    assert parse_nvidia_smi_xml(text).devices[0].power_w == 70.10


def test_volatile_double_bit_errors_make_the_gpu_degraded():
    _, second = parse_nvidia_smi_xml(fixture("nvidia_smi_q_t4_na.xml")).devices
    assert second.health == "degraded"
    assert second.health_detail == "ECC volatile uncorrectable (DBE) errors: 2"


def test_volatile_dram_uncorrectable_errors_of_the_v12_dtd_make_the_gpu_degraded():
    text = replace_once(
        fixture("nvidia_smi_q_a100_mig.xml"),
        "<dram_uncorrectable>0</dram_uncorrectable>",
        "<dram_uncorrectable>4</dram_uncorrectable>",
    )
    first = parse_nvidia_smi_xml(text).devices[0]
    assert first.health == "degraded"
    assert "4" in first.health_detail


def test_a_row_remapping_failure_makes_the_gpu_degraded():
    text = replace_once(
        fixture("nvidia_smi_q_a100_mig.xml"),
        "<remapped_row_failure>No</remapped_row_failure>",
        "<remapped_row_failure>Yes</remapped_row_failure>",
    )
    assert parse_nvidia_smi_xml(text).devices[0].health_detail == "row remapping failure"


def test_it_warns_when_attached_gpus_disagrees_with_the_gpu_elements():
    text = replace_once(fixture("nvidia_smi_q_a100_mig.xml"), "<attached_gpus>2", "<attached_gpus>3")
    assert "attached_gpus" in parse_nvidia_smi_xml(text).warnings[0]


def test_truncated_xml_fails_naming_the_line_and_column():
    text = fixture("nvidia_smi_q_a100_mig.xml")
    truncated = text[: text.index("<gpu_power_readings>", text.index('id="00000000:2B:00.0"'))]
    error = parse_error(parse_nvidia_smi_xml, truncated)
    assert re.match(r"line \d+: XML is not well-formed at column \d+", error.message)
    assert error.details["line"] == truncated.count("\n") + 1


def test_text_that_is_not_xml_fails_on_line_1():
    error = parse_error(
        parse_nvidia_smi_xml, "NVIDIA-SMI has failed because it couldn't communicate with the driver."
    )
    assert error.message.startswith("line 1: XML is not well-formed")


def test_a_foreign_root_element_fails():
    error = parse_error(parse_nvidia_smi_xml, "<?xml version='1.0'?><rocm/>")
    assert error.message.startswith("element rocm:")


def test_a_gpu_without_uuid_fails_naming_the_element():
    text = fixture("nvidia_smi_q_a100_mig.xml")
    text = replace_once(text, "<uuid>GPU-a90b17c4-5e2d-4b8f-b3c6-71d0e4f85a22</uuid>", "")
    error = parse_error(parse_nvidia_smi_xml, text)
    assert error.message.startswith("element gpu[2]/uuid:")
    assert error.details["element"] == "gpu[2]/uuid"


def test_a_memory_size_in_the_wrong_unit_fails_naming_the_element():
    text = replace_once(
        fixture("nvidia_smi_q_a100_mig.xml"), "<total>81920 MiB</total>", "<total>80 GB</total>"
    )
    error = parse_error(parse_nvidia_smi_xml, text)
    assert error.message == "element gpu[1]/fb_memory_usage/total: '80 GB' is not '<n> MiB'"


def test_a_mig_device_without_gpu_instance_id_fails_naming_the_element():
    text = replace_once(fixture("nvidia_smi_q_a100_mig.xml"), "<gpu_instance_id>3</gpu_instance_id>", "")
    error = parse_error(parse_nvidia_smi_xml, text)
    assert error.message.startswith("element gpu[1]/mig_devices/mig_device[2]/gpu_instance_id:")


def test_two_gpus_with_the_same_minor_number_fail():
    text = replace_once(
        fixture("nvidia_smi_q_a100_mig.xml"),
        "<minor_number>1</minor_number>",
        "<minor_number>0</minor_number>",
    )
    error = parse_error(parse_nvidia_smi_xml, text)
    assert error.message.startswith("element gpu[2]/minor_number: index 0 already used by gpu[1]")


def test_entity_expansion_is_refused():
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>'
    error = parse_error(parse_nvidia_smi_xml, bomb)
    assert "forbidden" in error.message


# ===================================================================================================
# nvidia-smi --query-gpu --format=csv
# ===================================================================================================


def test_the_agent_query_fields_are_the_documented_column_order():
    assert AGENT_QUERY_FIELDS == (
        "index",
        "uuid",
        "name",
        "serial",
        "pci.bus_id",
        "memory.total",
        "driver_version",
        "vbios_version",
        "utilization.gpu",
        "memory.used",
        "temperature.gpu",
        "power.draw",
    )


def test_it_maps_csv_columns_by_header_name_with_unit_suffixes():
    report = parse_nvidia_smi_csv(fixture("nvidia_smi_query_header.csv"))
    assert report.node["driver_version"] == "550.90.07"
    assert [d.index for d in report.devices] == [0, 1, 2, 3]
    first = report.devices[0]
    assert first.model_name == "NVIDIA H100 80GB HBM3"
    assert first.uuid == "GPU-1b7e0c55-8a0f-4c3e-9d21-5f6a7b8c9d01"
    assert first.pci_bus_id == "0000:18:00.0"
    assert first.utilization_pct == 97.0
    assert first.memory_used_mib == 72000
    assert first.memory_mib == 81559
    assert first.power_w == 612.48
    assert first.temperature_c == 61.0
    assert first.serial == "1654223018841"
    assert first.mig_enabled is False
    assert first.pci_device_id == "0x2330"


def test_it_turns_bracketed_na_csv_values_into_none():
    report = parse_nvidia_smi_csv(fixture("nvidia_smi_query_header.csv"))
    third, fourth = report.devices[2], report.devices[3]
    assert third.serial is None
    assert third.mig_enabled is True
    assert fourth.utilization_pct is None
    assert fourth.memory_used_mib is None
    assert fourth.power_w is None
    assert fourth.mig_enabled is None


def test_it_reads_noheader_nounits_csv_in_the_agent_column_order():
    report = parse_nvidia_smi_csv(fixture("nvidia_smi_query_noheader_nounits.csv"))
    assert report.node["driver_version"] == "535.161.08"
    assert len(report.devices) == 8
    first, last = report.devices[0], report.devices[7]
    assert first.uuid == "GPU-8d0e3a21-6b4c-4f7d-9e10-2a3b4c5d6e70"
    assert first.serial == "1323621015521"
    assert first.pci_bus_id == "0000:07:00.0"
    assert first.memory_mib == 81920
    assert first.firmware_version == "92.00.45.00.03"
    assert first.utilization_pct == 100.0
    assert first.memory_used_mib == 78150
    assert first.temperature_c == 64.0
    assert first.power_w == 355.21
    assert last.utilization_pct is None
    assert last.power_w is None


def test_it_accepts_a_header_with_any_order_and_subset_of_fields():
    text = "memory.total [MiB], index, gpu_uuid\n23028 MiB, 0, GPU-aa\n23028 MiB, 1, GPU-bb\n"
    report = parse_nvidia_smi_csv(text)
    assert [(d.index, d.uuid, d.memory_mib) for d in report.devices] == [
        (0, "GPU-aa", 23028),
        (1, "GPU-bb", 23028),
    ]
    assert report.node["driver_version"] is None


def test_it_warns_when_the_header_has_no_uuid_and_keeps_unknown_fields_in_extra():
    report = parse_nvidia_smi_csv("index, pstate, compute_cap\n0, P0, 8.0\n")
    assert report.devices[0].extra == {"pstate": "P0", "compute_cap": "8.0"}
    assert "uuid" in report.warnings[0]


def test_uncorrected_volatile_ecc_in_csv_sets_health():
    text = "index, uuid, ecc.errors.uncorrected.volatile.total\n0, GPU-a, 0\n1, GPU-b, 3\n2, GPU-c, [N/A]\n"
    healthy, degraded, unknown = parse_nvidia_smi_csv(text).devices
    assert healthy.health == "healthy"
    assert degraded.health == "degraded"
    assert unknown.health is None


def test_a_csv_line_with_the_wrong_field_count_fails_naming_the_line():
    text = fixture("nvidia_smi_query_header.csv")
    lines = text.splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0]
    error = parse_error(parse_nvidia_smi_csv, "\n".join(lines))
    assert error.message == "line 3: expected 13 comma-separated fields, got 12"
    assert error.details["line"] == 3


def test_a_noheader_line_with_the_wrong_field_count_fails_naming_the_line():
    text = fixture("nvidia_smi_query_noheader_nounits.csv") + "8, GPU-x, NVIDIA A100-SXM4-80GB, 1\n"
    error = parse_error(parse_nvidia_smi_csv, text)
    assert error.message == "line 9: expected 12 comma-separated fields, got 4"


def test_a_non_numeric_csv_value_fails_naming_line_and_field():
    text = replace_once(fixture("nvidia_smi_query_header.csv"), "72000 MiB", "72000 GB")
    error = parse_error(parse_nvidia_smi_csv, text)
    assert error.message == "line 2: field 'memory.used': '72000 GB' is not '<n> MiB'"


def test_a_csv_header_without_index_fails():
    error = parse_error(parse_nvidia_smi_csv, "uuid, name\nGPU-a, T4\n")
    assert error.message == "line 1: the header has no 'index' field"


def test_no_devices_found_fails_instead_of_reporting_an_empty_node():
    error = parse_error(parse_nvidia_smi_csv, "No devices were found\n")
    assert error.message.startswith("line 1: nvidia-smi reported 'No devices were found'")


def test_a_repeated_csv_index_fails():
    error = parse_error(parse_nvidia_smi_csv, "index, uuid\n0, GPU-a\n0, GPU-b\n")
    assert error.message == "line 3: index 0 already used on line 2"


# ===================================================================================================
# nvidia-smi topo -m
# ===================================================================================================


def test_it_reads_one_device_per_gpu_row_without_claiming_a_full_inventory():
    report = parse_nvidia_topo(fixture("nvidia_topo_h100_8gpu_nics.txt"))
    assert [d.index for d in report.devices] == list(range(8))
    assert report.full_inventory is False
    assert [d.numa_node for d in report.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert report.warnings == []


def test_it_reads_each_gpu_pair_once_as_a_link():
    report = parse_nvidia_topo(fixture("nvidia_topo_h100_8gpu_nics.txt"))
    assert len(report.links) == 28  # 8 choose 2
    assert {link.link for link in report.links} == {"NV18"}
    assert report.links[0] == ParsedLink(a=0, b=1, link="NV18")
    assert all(link.a < link.b for link in report.links)


def test_it_reads_cpu_and_numa_affinity_per_gpu():
    gpus = parse_nvidia_topo(fixture("nvidia_topo_h100_8gpu_nics.txt")).topology["gpus"]
    assert gpus[0] == {"cpu_affinity": "0-55,112-167", "numa_affinity": "0", "gpu_numa_id": None}
    assert gpus[7] == {"cpu_affinity": "56-111,168-223", "numa_affinity": "1", "gpu_numa_id": None}


def test_it_reads_the_gpu_numa_id_column():
    report = parse_nvidia_topo(fixture("nvidia_topo_gh200_1gpu.txt"))
    assert report.topology["gpus"][0] == {"cpu_affinity": "0-71", "numa_affinity": "0", "gpu_numa_id": 1}
    assert report.links == []
    assert report.devices[0].numa_node == 0


def test_it_names_nics_from_the_nic_legend_with_their_gpu_relations():
    nics = parse_nvidia_topo(fixture("nvidia_topo_h100_8gpu_nics.txt")).topology["nics"]
    assert list(nics) == [f"NIC{i}" for i in range(10)]
    assert nics["NIC0"] == {
        "name": "mlx5_0",
        "gpu_links": {0: "PIX", 1: "PXB", 2: "NODE", 3: "NODE", 4: "SYS", 5: "SYS", 6: "SYS", 7: "SYS"},
    }
    assert nics["NIC8"]["name"] == "mlx5_bond_0"


def test_it_reads_an_older_driver_matrix_with_mlx5_columns_and_no_gpu_numa_id():
    report = parse_nvidia_topo(fixture("nvidia_topo_a100_pcie_old_driver.txt"))
    assert [(link.a, link.b, link.link) for link in report.links] == [
        (0, 1, "NV12"),
        (0, 2, "SYS"),
        (0, 3, "SYS"),
        (1, 2, "SYS"),
        (1, 3, "SYS"),
        (2, 3, "NV12"),
    ]
    assert report.topology["nics"]["mlx5_1"] == {
        "name": "mlx5_1",
        "gpu_links": {0: "SYS", 1: "SYS", 2: "PIX", 3: "PHB"},
    }
    assert report.topology["gpus"][2] == {
        "cpu_affinity": "20-39,60-79",
        "numa_affinity": "1",
        "gpu_numa_id": None,
    }
    assert [d.numa_node for d in report.devices] == [0, 0, 1, 1]


def test_it_tolerates_runs_of_spaces_instead_of_tabs():
    tabs = parse_nvidia_topo(fixture("nvidia_topo_a100_pcie_old_driver.txt"))
    spaces = parse_nvidia_topo(fixture("nvidia_topo_a100_pcie_old_driver.txt").expandtabs(8))
    assert spaces.links == tabs.links
    assert spaces.topology == tabs.topology
    wide = parse_nvidia_topo(fixture("nvidia_topo_h100_8gpu_nics.txt").replace("\t", "    "))
    assert wide.topology["gpus"][5] == {
        "cpu_affinity": "56-111,168-223",
        "numa_affinity": "1",
        "gpu_numa_id": None,
    }
    assert len(wide.links) == 28


def test_an_empty_cpu_affinity_cell_is_none():
    text = fixture("nvidia_topo_h100_8gpu_nics.txt").replace("\t56-111,168-223\t1\t\tN/A", "\t\t1\t\tN/A")
    gpus = parse_nvidia_topo(text).topology["gpus"]
    assert gpus[4] == {"cpu_affinity": None, "numa_affinity": "1", "gpu_numa_id": None}


def test_a_multi_node_numa_affinity_gives_no_numa_node():
    text = fixture("nvidia_topo_a100_pcie_old_driver.txt").replace("\t0-19,40-59\t0", "\t0-79\t0-1")
    report = parse_nvidia_topo(text)
    assert report.devices[0].numa_node is None
    assert report.topology["gpus"][0]["numa_affinity"] == "0-1"


def test_a_topo_row_missing_a_cell_fails_naming_the_line():
    text = fixture("nvidia_topo_h100_8gpu_nics.txt")
    lines = text.splitlines()
    cells = lines[4].split("\t")
    del cells[3]
    lines[4] = "\t".join(cells)
    error = parse_error(parse_nvidia_topo, "\n".join(lines))
    assert error.message.startswith("line 5: row GPU3")
    assert error.details["line"] == 5


def test_a_topo_row_with_an_extra_cell_fails_naming_the_line():
    text = fixture("nvidia_topo_a100_pcie_old_driver.txt")
    text = replace_once(
        text, "GPU1\tNV12\t X \tSYS\tSYS\tPHB\tSYS", "GPU1\tNV12\t X \tSYS\tSYS\tSYS\tPHB\tSYS"
    )
    error = parse_error(parse_nvidia_topo, text)
    assert error.message.startswith("line 3: row GPU1 has 9 cells after the label, the header has 8")


def test_a_topo_matrix_cut_short_fails_as_truncated():
    text = fixture("nvidia_topo_h100_8gpu_nics.txt")
    cut = "\n".join(text.splitlines()[:7])
    error = parse_error(parse_nvidia_topo, cut)
    assert "matrix ends before the row for GPU6" in error.message
    assert error.message.startswith("line 8:")


def test_nic_columns_without_the_nic_legend_fail_as_truncated():
    text = fixture("nvidia_topo_h100_8gpu_nics.txt")
    cut = text[: text.index("NIC Legend:")]
    error = parse_error(parse_nvidia_topo, cut)
    assert "NIC Legend" in error.message


def test_an_off_diagonal_x_fails_naming_the_line():
    text = replace_once(fixture("nvidia_topo_a100_pcie_old_driver.txt"), "GPU2\tSYS", "GPU2\tX")
    error = parse_error(parse_nvidia_topo, text)
    assert error.message == "line 4: row GPU2, column GPU0: 'X' off the diagonal"


def test_text_without_a_matrix_header_fails():
    error = parse_error(
        parse_nvidia_topo, "\nNVIDIA-SMI has failed because it couldn't communicate with the driver.\n"
    )
    assert error.message.startswith("line 2: no matrix header found")


def test_an_unknown_topology_cell_is_kept_with_a_warning():
    text = fixture("nvidia_topo_a100_pcie_old_driver.txt")
    text = text.replace("GPU0\t X \tNV12\tSYS", "GPU0\t X \tNV12\tC2C").replace(
        "GPU2\tSYS\tSYS\t X ", "GPU2\tC2C\tSYS\t X "
    )
    report = parse_nvidia_topo(text)
    assert ParsedLink(a=0, b=2, link="C2C") in report.links
    assert report.warnings == ["unknown topology cells: C2C"]


# ===================================================================================================
# npu-smi info
# ===================================================================================================


def test_it_reads_eight_910b3_chips_and_the_driver_version_from_the_banner():
    report = parse_npu_smi(fixture("npu_smi_910b3_8chip.txt"))
    assert report.vendor == "huawei"
    assert report.node["driver_version"] == "23.0.3"
    assert report.node["smi_version"] == "23.0.3"
    assert [d.index for d in report.devices] == list(range(8))
    assert {d.model_name for d in report.devices} == {"910B3"}
    assert report.full_inventory is True


def test_it_reads_health_power_temperature_bus_aicore_and_hbm_per_chip():
    report = parse_npu_smi(fixture("npu_smi_910b3_8chip.txt"))
    first, third = report.devices[0], report.devices[2]
    assert first.health == "healthy"
    assert first.health_detail is None
    assert first.power_w == 93.6
    assert first.temperature_c == 37.0
    assert first.pci_bus_id == "0000:C1:00.0"
    assert first.utilization_pct == 0.0
    assert first.memory_mib == 65536
    assert first.memory_used_mib == 3339
    assert third.utilization_pct == 98.0
    assert third.memory_used_mib == 61875


def test_it_attaches_running_processes_to_their_chip():
    devices = parse_npu_smi(fixture("npu_smi_910b3_8chip.txt")).devices
    assert devices[2].extra["processes"] == [{"pid": 2184731, "name": "python3.10", "memory_mib": 58432}]
    assert "processes" not in devices[0].extra


@pytest.mark.parametrize("state", ["Warning", "Alarm", "Critical"])
def test_a_chip_that_is_not_ok_is_degraded_with_the_raw_health(state):
    text = replace_once(
        fixture("npu_smi_910b3_8chip.txt"),
        "| 5     910B3               | OK     ",
        f"| 5     910B3               | {state:<7}",
    )
    device = parse_npu_smi(text).devices[5]
    assert device.health == "degraded"
    assert device.health_detail == state


def test_it_indexes_a3_chips_by_physical_id():
    report = parse_npu_smi(fixture("npu_smi_a3_phy_id.txt"))
    assert report.node["driver_version"] == "24.1.rc3"
    assert [(d.index, d.extra["npu_id"], d.extra["chip_id"]) for d in report.devices] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    assert [d.pci_bus_id for d in report.devices] == [
        "0000:9D:00.0",
        "0000:9F:00.0",
        "0000:99:00.0",
        "0000:9B:00.0",
    ]
    assert {d.model_name for d in report.devices} == {"Ascend910"}
    assert report.devices[1].extra["processes"][0]["pid"] == 913378


def test_a_dash_power_on_the_second_a3_chip_is_none():
    devices = parse_npu_smi(fixture("npu_smi_a3_phy_id.txt")).devices
    assert devices[0].power_w == 171.3
    assert devices[1].power_w is None
    assert devices[1].temperature_c == 43.0


def test_it_reads_310p_chips_without_hbm_from_memory_usage():
    devices = parse_npu_smi(fixture("npu_smi_310p_duo.txt")).devices
    assert [(d.index, d.extra["npu_id"]) for d in devices] == [(0, 6), (1, 6)]
    assert devices[0].memory_mib == 44280
    assert devices[0].memory_used_mib == 1175
    assert devices[0].power_w is None  # NA
    assert devices[1].health == "degraded"
    assert devices[1].utilization_pct == 12.0


def test_a_chip_missing_its_second_line_fails_naming_the_line():
    text = fixture("npu_smi_910b3_8chip.txt")
    lines = text.splitlines()
    second = line_of(text, "0000:82:00.0")
    del lines[second - 1]
    error = parse_error(parse_npu_smi, "\n".join(lines))
    # The separator after the missing line is skipped; NPU 4's first line is where it fails.
    assert error.message.startswith(
        f"line {second + 1}: expected the second line of NPU 3 (line {second - 1})"
    )


def test_output_cut_after_the_first_line_of_a_chip_fails_as_truncated():
    text = fixture("npu_smi_910b3_8chip.txt")
    cut_at = line_of(text, "| 7     910B3")
    cut = "\n".join(text.splitlines()[:cut_at])
    error = parse_error(parse_npu_smi, cut)
    assert (
        error.message
        == f"line {cut_at + 1}: NPU 7 has no second line (Chip | Bus-Id | AICore ...); truncated output?"
    )


def test_a_non_numeric_power_fails_naming_the_line():
    text = replace_once(fixture("npu_smi_910b3_8chip.txt"), "| 95.1 ", "| 9x.1 ")
    error = parse_error(parse_npu_smi, text)
    assert error.message == f"line {line_of(text, '9x.1')}: Power(W): '9x.1' is not a number"


def test_a_non_numeric_hbm_usage_fails_naming_the_line():
    text = replace_once(fixture("npu_smi_910b3_8chip.txt"), "3337 / 65536", "3337 / 64G  ")
    error = parse_error(parse_npu_smi, text)
    assert error.message == f"line {line_of(text, '64G')}: HBM-Usage(MB): '64G' is not a number"


def test_a_chip_line_with_a_missing_field_fails_naming_the_line():
    text = replace_once(
        fixture("npu_smi_910b3_8chip.txt"),
        "0           0    / 0          3340 / 65536",
        "0           0    / 0          3340        ",
    )
    error = parse_error(parse_npu_smi, text)
    assert error.message.startswith(
        f"line {line_of(text, '0000:C2:00.0')}: expected 'AICore(%) <used> / <total> <used> / <total>'"
    )


def test_npu_smi_without_the_banner_fails():
    error = parse_error(parse_npu_smi, "-bash: npu-smi: command not found\n")
    assert error.message.startswith("line 1: no 'npu-smi <version>  Version: <version>' banner")


# ===================================================================================================
# rocm-smi --showallinfo --json
# ===================================================================================================


def test_it_reads_two_mi210_cards_and_the_driver_version():
    report = parse_rocm_smi_json(fixture("rocm_smi_mi210_xgmi.json"))
    assert report.vendor == "amd"
    assert report.node["driver_version"] == "6.7.0"
    first, second = report.devices
    assert (first.index, second.index) == (0, 1)
    assert first.uuid == "0x8b2f0c7a1d4e6f35"
    assert first.serial == "692251000317"
    assert first.model_name == "Aldebaran/MI200 [Instinct MI210]"
    assert first.pci_bus_id == "0000:63:00.0"
    assert first.pci_device_id == "0x740F"
    assert first.memory_mib == 65520
    assert first.memory_used_mib == 10
    assert first.firmware_version == "113-D67301-063"
    assert first.numa_node == 0
    assert first.temperature_c == 41.0  # junction preferred over edge
    assert first.power_w == 42.0
    assert second.utilization_pct == 100.0
    assert second.memory_used_mib == 51615


def test_it_reads_xgmi_links_from_the_system_topology():
    report = parse_rocm_smi_json(fixture("rocm_smi_mi210_xgmi.json"))
    assert report.links == [ParsedLink(a=0, b=1, link="XGMI")]
    assert report.topology["pairs"] == [{"a": 0, "b": 1, "link_type": "XGMI", "weight": 15, "hops": 1}]


def test_pcie_pairs_are_kept_in_topology_but_not_as_links():
    text = fixture("rocm_smi_mi210_xgmi.json").replace('"XGMI"', '"PCIE"')
    report = parse_rocm_smi_json(text)
    assert report.links == []
    assert report.topology["pairs"][0]["link_type"] == "PCIE"


def test_it_reads_the_older_lower_case_card_series_key_and_edge_temperature():
    data = json.loads(fixture("rocm_smi_mi210_xgmi.json"))
    card = data["card0"]
    card["Card series"] = card.pop("Card Series")
    del card["Temperature (Sensor junction) (C)"]
    card["Serial Number"] = "N/A"
    device = parse_rocm_smi_json(json.dumps(data)).devices[0]
    assert device.model_name == "Aldebaran/MI200 [Instinct MI210]"
    assert device.temperature_c == 38.0
    assert device.serial is None


def test_invalid_json_fails_naming_line_and_column():
    text = fixture("rocm_smi_mi210_xgmi.json")
    cut = text[: text.index('"card1"')]
    error = parse_error(parse_rocm_smi_json, cut)
    assert re.match(r"line \d+: invalid JSON at column \d+", error.message)
    assert error.details["line"] == cut.count("\n") + 1


def test_a_card_entry_that_is_not_an_object_fails_naming_the_key():
    data = json.loads(fixture("rocm_smi_mi210_xgmi.json"))
    data["card1"] = "ERROR: GPU[1] : Unable to read"
    error = parse_error(parse_rocm_smi_json, json.dumps(data))
    assert error.message == "element card1: expected an object, got str"


def test_a_non_numeric_vram_total_fails_naming_the_key():
    data = json.loads(fixture("rocm_smi_mi210_xgmi.json"))
    data["card0"]["VRAM Total Memory (B)"] = "64 GB"
    error = parse_error(parse_rocm_smi_json, json.dumps(data))
    assert error.message == "element card0/VRAM Total Memory (B): '64 GB' is not a number"


def test_json_without_cards_fails():
    error = parse_error(parse_rocm_smi_json, '{"system": {"Driver version": "6.7.0"}}')
    assert "no card0..N" in error.message


# ===================================================================================================
# hy-smi
# ===================================================================================================


def test_it_reads_the_dcu_header_variant():
    report = parse_hy_smi(fixture("hy_smi_dcu.txt"))
    assert report.vendor == "hygon"
    assert report.full_inventory is True
    assert [d.index for d in report.devices] == [0, 1, 2, 3]
    second = report.devices[1]
    assert second.temperature_c == 45.0
    assert second.power_w == 238.0
    assert second.utilization_pct == 97.3
    assert second.model_name is None
    assert second.extra == {
        "perf_level": "auto",
        "power_cap_w": 450.0,
        "vram_used_pct": 91.0,
        "mode": "Normal",
    }


def test_it_reads_the_newer_hcu_header_variant_with_codec_columns():
    report = parse_hy_smi(fixture("hy_smi_hcu.txt"))
    assert len(report.devices) == 8
    third, sixth = report.devices[2], report.devices[5]
    assert third.utilization_pct == 99.1
    assert third.power_w == 612.0
    assert third.extra["power_cap_w"] == 800.0
    assert third.extra["perf_level"] == "high"
    assert sixth.extra["decoder_pct"] == 12.5
    assert sixth.extra["encoder_pct"] == 3.0
    assert report.topology["device_word"] == "HCU"


def test_it_locates_hy_smi_columns_by_the_header():
    text = (
        "===================System Management Interface =================\n"
        "==========================================================\n"
        "DCU Temp AvgPwr Fan Perf PwrCap VRAM% DCU%\n"
        "0 50.0c 55.0W 0.0% auto 280.0W 0% 12%\n"
        "==========================================================\n"
        "======================End of SMI Log========================\n"
    )
    device = parse_hy_smi(text).devices[0]
    assert (device.temperature_c, device.power_w, device.utilization_pct) == (50.0, 55.0, 12.0)
    assert device.extra["power_cap_w"] == 280.0
    assert device.extra["fan_pct"] == 0.0


def test_hy_smi_without_the_end_rule_fails_as_truncated():
    text = fixture("hy_smi_hcu.txt")
    cut = text[: text.index("=====", text.index("7       37.0C"))]
    error = parse_error(parse_hy_smi, cut)
    assert "End of SMI Log" in error.message
    assert "truncated" in error.message
    assert error.message.startswith(f"line {len(cut.splitlines())}:")


def test_a_hy_smi_row_cut_mid_line_fails_naming_the_line():
    text = fixture("hy_smi_dcu.txt")
    cut = text[: text.index("118.0W")]
    error = parse_error(parse_hy_smi, cut)
    assert (
        error.message == f"line {line_of(cut, '3       41.0C')}: expected 8 columns as in the header, got 2"
    )


def test_a_hy_smi_value_with_the_wrong_unit_fails_naming_the_line():
    text = replace_once(fixture("hy_smi_dcu.txt"), "238.0W", "238.0V")
    error = parse_error(parse_hy_smi, text)
    assert error.message == f"line {line_of(text, '238.0V')}: column AvgPwr: '238.0V' is not '<n>W'"


def test_text_that_is_not_hy_smi_fails():
    error = parse_error(parse_hy_smi, "hy-smi: error while loading shared libraries\n")
    assert error.message.startswith("line 1: no '=== System Management Interface ===' rule")
