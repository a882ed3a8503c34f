"""The AMD parser: rocm-smi --showallinfo --json (no database)."""

from __future__ import annotations

import json
import re

from apps.inventory.vendors import (
    ParsedLink,
)
from apps.inventory.vendors.amd import parse_rocm_smi_json
from tests.inventory.parsing import fixture, parse_error

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
