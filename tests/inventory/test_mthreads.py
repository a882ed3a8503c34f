"""Moore Threads (issue 28): the ``mthreads-gmi`` parser on the only public sample (the first two cards of
the output posted in vllm-project/vllm-omni pull request #2337; tests/inventory/fixtures/SOURCES.md),
``--kind auto`` recognition by its banner, and refusals of cut or foreign outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.core.errors import ParseFailed
from apps.inventory.vendors import ADAPTERS, KIND_VENDORS, detect_kind, parse_report

FIXTURE = Path(__file__).parent / "fixtures" / "mthreads_gmi_s5000_excerpt.txt"


def sample() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def test_the_published_output_gives_two_s5000_cards_with_their_bus_ids_and_memory():
    report = parse_report("mthreads-gmi", sample())
    assert report.vendor == "mthreads" and KIND_VENDORS["mthreads-gmi"] == "mthreads"
    assert (report.node["smi_version"], report.node["driver_version"]) == ("2.3.2", "3.3.5-server")
    assert [(d.index, d.model_name, d.pci_bus_id) for d in report.devices] == [
        (0, "MTT S5000", "0000:2A:00.0"),
        (1, "MTT S5000", "0000:3A:00.0"),
    ]
    first, second = report.devices
    assert (first.memory_used_mib, first.memory_mib) == (66641, 81920)  # "66641MiB(81920MiB)"
    assert (second.memory_used_mib, second.temperature_c, second.utilization_pct) == (64889, 51.0, 0.0)
    assert first.extra == {
        "device_type": "Physical",
        "perf": "P0",
        "pcie_lane_width": "16x(16x)",
        "mpc_capable": "YES",
        "ecc_mode": "On-die, EDC",
    }
    # The view prints no UUID, serial or power: unknown, not invented.
    assert (first.uuid, first.serial, first.power_w) == (None, None, None)


def test_auto_recognises_the_banner_and_no_other_parser_takes_it():
    assert detect_kind(sample()) == "mthreads-gmi"
    report = parse_report("auto", sample())
    assert (report.kind, report.requested_kind) == ("mthreads-gmi", "auto")
    for kind in ("hy-smi", "mx-smi", "efsmi", "nvidia-smi-csv"):
        with pytest.raises(ParseFailed):
            parse_report(kind, sample())


def test_a_card_cut_before_its_closing_rule_is_refused_as_truncated():
    lines = sample().splitlines()
    cut = "\n".join(lines[:-2]) + "\n"  # card 1 without its ECC line and rule
    with pytest.raises(ParseFailed) as err:
        parse_report("mthreads-gmi", cut)
    assert "card 1" in err.value.message and "truncated" in err.value.message
    assert err.value.message.startswith("line ")


def test_the_banner_without_the_card_table_is_refused_naming_the_tool_and_the_view():
    banner_only = "\n".join(sample().splitlines()[:4]) + "\nsomething else\n"
    with pytest.raises(ParseFailed) as err:
        parse_report("auto", banner_only)
    assert "Moore Threads mthreads-gmi" in err.value.message and "card table" in err.value.message
    assert err.value.details["looks_like"] == "Moore Threads mthreads-gmi"


def test_a_bad_bus_id_names_the_line():
    text = sample().replace("00000000:2a:00.0", "0000:zz:00.0    ")
    with pytest.raises(ParseFailed) as err:
        parse_report("mthreads-gmi", text)
    assert err.value.details["line"] == 9


def test_the_adapter_names_the_vendors_whole_card_resource_and_runtime_variable():
    adapter = ADAPTERS["mthreads"]
    assert adapter.resource_name == "mthreads.com/gpu"
    assert adapter.visible_devices_env == "MTHREADS_VISIBLE_DEVICES"
    assert adapter.node_labels("MTT S5000") == {
        "accelerator": "mthreads-gpu",
        "gpu-brand": "mthreads",
        "gpu-model": "MTT-S5000",
    }
