"""The NVIDIA parsers: nvidia-smi -q -x, --query-gpu csv and topo -m (no database)."""

from __future__ import annotations

import re

from apps.inventory.vendors import (
    AGENT_QUERY_FIELDS,
    ParsedLink,
)
from apps.inventory.vendors.nvidia import parse_nvidia_smi_csv, parse_nvidia_smi_xml, parse_nvidia_topo
from tests.inventory.parsing import fixture, parse_error, replace_once

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
