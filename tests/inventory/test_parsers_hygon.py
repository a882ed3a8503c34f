"""The Hygon parser: hy-smi (no database)."""

from __future__ import annotations

from apps.inventory.vendors.hygon import parse_hy_smi
from tests.inventory.parsing import fixture, line_of, parse_error, replace_once

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
