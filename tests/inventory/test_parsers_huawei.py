"""The Huawei Ascend parser: npu-smi info (no database)."""

from __future__ import annotations

import pytest

from apps.inventory.vendors.huawei import parse_npu_smi
from tests.inventory.parsing import fixture, line_of, parse_error, replace_once

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
