"""Hygon DCU: adapter facts and the ``hy-smi`` parser.

``hy-smi`` prints one whitespace-separated table framed by ``=`` rules::

    ============================ System Management Interface =============================
    ======================================================================================
    DCU     Temp     AvgPwr     Perf     PwrCap     VRAM%      DCU%      Mode
    0       33.0C    132.0W     auto     450.0W     30%        0.0%      Normal
    ======================================================================================
    =================================== End of SMI Log ===================================

Newer releases call the device an HCU and add decoder/encoder columns
(``HCU Temp AvgPwr Perf PwrCap VRAM% HCU% Dec% Enc% Mode``); older DTK ``rocm-smi`` builds print
``Fan``, ``SCLK``, ``MCLK`` too. Columns are located by the header, so all of these read alike.
hy-smi names no model, so ``model_name`` is None; PwrCap, VRAM%, Perf, Mode, ... go to ``extra``.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from .adapter import VendorAdapter, fail_line, na, parse_number, text_lines
from .amd import parse_smi_topology_text
from .base import ParsedDevice, ParsedReport

VENDOR = "hygon"
KIND = "hy-smi"

_RULE = re.compile(r"=+")
_UNITS = {"temp": "C", "avgpwr": "W", "pwrcap": "W", "sclk": "Mhz", "mclk": "Mhz", "fan": "%"}
_EXTRA_NAMES = {
    "PwrCap": "power_cap_w",
    "VRAM%": "vram_used_pct",
    "Perf": "perf_level",
    "Mode": "mode",
    "Dec%": "decoder_pct",
    "Enc%": "encoder_pct",
    "Fan": "fan_pct",
    "SCLK": "sclk_mhz",
    "MCLK": "mclk_mhz",
}


def parse_hy_smi(text: str) -> ParsedReport:
    lines = text_lines(text, kind=KIND)
    start = next((n for n, line in enumerate(lines, start=1) if "System Management Interface" in line), None)
    if start is None:
        first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
        fail_line(
            first, _("no '=== System Management Interface ===' rule; is this hy-smi output?"), kind=KIND
        )

    header_no = None
    for n in range(start + 1, len(lines) + 1):
        stripped = lines[n - 1].strip()
        if not stripped or _RULE.fullmatch(stripped):
            continue
        header_no = n
        break
    if header_no is None:
        fail_line(len(lines), _("output ends before the table header (truncated?)"), kind=KIND)
    header = lines[header_no - 1].split()
    device_word = header[0].upper()
    if device_word not in ("DCU", "HCU") or "Temp" not in header:
        fail_line(
            header_no,
            _("expected a 'DCU|HCU  Temp  AvgPwr ...' header"),
            kind=KIND,
            text=lines[header_no - 1],
        )

    report = ParsedReport(vendor=VENDOR, kind=KIND)
    seen: dict[int, int] = {}
    end_no = None
    for n in range(header_no + 1, len(lines) + 1):
        line = lines[n - 1]
        stripped = line.strip()
        if "End of SMI Log" in stripped:
            end_no = n
            break
        if not stripped or _RULE.fullmatch(stripped):
            continue
        cells = stripped.split()
        if len(cells) != len(header):
            fail_line(
                n,
                _("expected %(count)s columns as in the header, got %(count2)s")
                % {"count": len(header), "count2": len(cells)},
                kind=KIND,
                text=line,
            )
        device = _row(dict(zip(header, cells, strict=True)), device_word, n, line)
        if device.index in seen:
            fail_line(
                n,
                _("%(device_word)s %(index)s already listed on line %(line)s")
                % {"device_word": device_word, "index": device.index, "line": seen[device.index]},
                kind=KIND,
                text=line,
            )
        seen[device.index] = n
        report.devices.append(device)
    if end_no is None:
        fail_line(len(lines), _("no '=== End of SMI Log ===' rule: the output is truncated"), kind=KIND)

    report.devices.sort(key=lambda d: d.index)
    report.topology = {"device_word": device_word}
    return report


def _row(values: dict[str, str], device_word: str, lineno: int, line: str) -> ParsedDevice:
    def number(column: str) -> float | None:
        if column not in values:
            return None
        raw = values[column]
        unit = "%" if column.endswith("%") else _UNITS.get(column.lower())
        try:
            return parse_number(raw, unit)
        except ValueError:
            expected = f"'<n>{unit}'" if unit else "a number"
            fail_line(
                lineno,
                _("column %(column)s: %(raw)r is not %(expected)s")
                % {"column": column, "raw": raw, "expected": expected},
                kind=KIND,
                text=line,
            )

    raw_index = values[device_word]
    if not re.fullmatch(r"\d+", raw_index):
        fail_line(
            lineno,
            _("column %(device_word)s: %(raw_index)r is not a device number")
            % {"device_word": device_word, "raw_index": raw_index},
            kind=KIND,
            text=line,
        )

    extra: dict[str, Any] = {}
    for column, raw in values.items():
        if column in (device_word, "Temp", "AvgPwr", f"{device_word}%"):
            continue
        key = _EXTRA_NAMES.get(column, column.lower().replace("%", "_pct"))
        if column.endswith("%") or column.lower() in _UNITS:
            extra[key] = number(column)
        else:
            extra[key] = na(raw)
    return ParsedDevice(
        index=int(raw_index),
        model_name=None,  # hy-smi does not print it
        utilization_pct=number(f"{device_word}%"),
        temperature_c=number("Temp"),
        power_w=number("AvgPwr"),
        extra=extra,
    )


# ===================================================================================================
# hy-smi --showtopo
# ===================================================================================================
#
# hy-smi is DTK's fork of rocm-smi: --showtopo prints the rocm-smi sections (weight, hops, link type
# XGMI/PCIE, NUMA nodes) between "System Management Interface" / "End of SMI Log" rules, with HCU
# (or DCU) device labels, e.g. "HCU[0]  : (Topology) Numa Node: 0". Read by the rocm-smi reader.

KIND_TOPO = "hy-smi-topo"


def parse_hy_smi_topo(text: str) -> ParsedReport:
    return parse_smi_topology_text(
        text,
        kind=KIND_TOPO,
        vendor=VENDOR,
        banner="System Management Interface",
        words=("HCU", "DCU", "GPU"),
        refuse_banner="ROCm",  # a rocm-smi output describes AMD cards
    )


# ===================================================================================================
# Adapter
# ===================================================================================================


class HygonAdapter(VendorAdapter):
    vendor = "hygon"
    display_name = "Hygon DCU"
    device_kind = "dcu"
    # The public dcu-exporter watches hygon.com/dcu (hardware-telemetry.md §1.4). Seed 004 shows a
    # dcu-device-plugin advertising amd.com/gpu; that is a ROCm plugin reused on DCU nodes, which would
    # collide with real AMD GPUs in one pool, so we use the Hygon name.
    resource_name = "hygon.com/dcu"
    visible_devices_env = "HIP_VISIBLE_DEVICES"  # DTK is HIP-based
    accelerator_label = "hygon-dcu"
    brand_label = "hygon"
    model_label_key = "dcu-model"
    parsers = {KIND: parse_hy_smi, KIND_TOPO: parse_hy_smi_topo}
