"""Iluvatar CoreX (天数智芯) GPUs: the ``ixsmi`` parser.

``ixsmi`` prints a ``Timestamp`` line and an nvidia-smi-style boxed table, two lines per card
(sample: PaddlePaddle/ERNIE docs/devices/README_ILUVATAR_GPU.md, tests/inventory/fixtures/SOURCES.md)::

    |  IX-ML: 4.3.0       Driver Version: 4.3.0       CUDA Version: 10.2          |
    |-------------------------------+----------------------+----------------------|
    | GPU  Name                     | Bus-Id               | Clock-SM  Clock-Mem  |
    | Fan  Temp  Perf  Pwr:Usage/Cap|      Memory-Usage    | GPU-Util  Compute M. |
    |===============================+======================+======================|
    | 0    Iluvatar BI-V150         | 00000000:13:00.0     | 1500MHz   1600MHz    |
    | N/A  35C   P0    N/A / N/A    | 64MiB / 32768MiB     | 0%        Default    |
    +-------------------------------+----------------------+----------------------+

then a ``Processes:`` box; an output without that box stopped after a card and is refused as
truncated. ixsmi prints no UUID or serial number (None).
"""

from __future__ import annotations

import re

from django.utils.translation import gettext as _

from .adapter import VendorAdapter, fail_line, na, parse_number, text_lines
from .base import ParsedDevice, ParsedReport
from .boxed import (
    CardRow,
    card_devices,
    card_index_and_name,
    fan_temp_perf_power,
    pci_bus_id_cell,
    require_processes_box,
    used_total_mib,
)

VENDOR = "iluvatar"
KIND = "ixsmi"

# What ``--kind auto`` looks for (apps/inventory/vendors/__init__.py).
SIGNATURE = re.compile(r"^\|\s*IX-ML:\s*\S+\s+Driver Version:", re.MULTILINE)

HEADER = re.compile(r"\|\s*GPU\s+Name\s*\|")
HEADER_TEXT = "| GPU  Name | Bus-Id | Clock-SM  Clock-Mem |"
TOOL = "Iluvatar CoreX ixsmi"
_BANNER = re.compile(
    r"\|\s*IX-ML:\s*(?P<smi>\S+)\s+Driver Version:\s*(?P<driver>\S+)(?:\s+CUDA Version:\s*(?P<cuda>\S+))?"
)


def parse_ixsmi(text: str) -> ParsedReport:
    lines = text_lines(text, kind=KIND)
    report = ParsedReport(vendor=VENDOR, kind=KIND)
    banner = next((m for line in lines if (m := _BANNER.match(line.strip()))), None)
    if banner is not None:
        report.node["smi_version"] = banner["smi"]
        report.node["driver_version"] = banner["driver"]
        report.node["cuda_version"] = na(banner["cuda"])
    report.devices, table = card_devices(
        lines, kind=KIND, header=HEADER, header_text=HEADER_TEXT, tool=TOOL, rows=2, card=_card
    )
    require_processes_box(lines, table, kind=KIND)
    return report


def _card(block: list[CardRow]) -> ParsedDevice:
    first, second = block
    index, name = card_index_and_name(first, kind=KIND)
    values = fan_temp_perf_power(second, kind=KIND)
    used, total = used_total_mib(second, 1, kind=KIND)
    util_mode = second.cells[2].split()
    clocks = first.cells[2].split()
    try:
        util = parse_number(util_mode[0] if util_mode else None, "%")
        sm_clock, mem_clock = (parse_number(c, "MHz") for c in (clocks + [None, None])[:2])
    except ValueError:
        fail_line(
            second.lineno,
            _("GPU %(index)s: GPU-Util %(cell)r is not '<n>%%'") % {"index": index, "cell": second.cells[2]},
            kind=KIND,
            text=second.line,
        )
    return ParsedDevice(
        index=index,
        model_name=name,
        memory_mib=total,
        memory_used_mib=used,
        pci_bus_id=pci_bus_id_cell(first, first.cells[1], kind=KIND),
        utilization_pct=util,
        temperature_c=values["temperature_c"],
        power_w=values["power_w"],
        extra={
            "fan_pct": values["fan_pct"],
            "perf": values["perf"],
            "power_cap_w": values["power_cap_w"],
            "compute_mode": na(util_mode[1]) if len(util_mode) > 1 else None,
            "sm_clock_mhz": sm_clock,
            "mem_clock_mhz": mem_clock,
        },
    )


PARSERS = {KIND: parse_ixsmi}


class IluvatarAdapter(VendorAdapter):
    """Iluvatar CoreX (天数智芯) GPUs, whole cards through Iluvatar's ix-device-plugin.

    * ``iluvatar.com/gpu``: Deep-Spark/ix-device-plugin pkg/dpm/plugin.go@1b517f33
      (``var ResourceName string = "iluvatar.com/gpu"``) and deployment/ix-device-plugin/values.yaml@87aa2b74
      (``resourceName: "iluvatar.com/gpu"``). The plugin's older README names ``iluvatar.ai/gpu``; HAMi
      names per-model shares (``iluvatar.ai/BI-V150-vgpu`` + ``.vCore`` + ``.vMem``,
      charts/hami/templates/scheduler/device-configmap.yaml), not rendered here.
    * ``IX_VISIBLE_DEVICES``: what the plugin's Allocate sets for the cards it gave (same plugin.go,
      ``p.allocateEnvs("IX_VISIBLE_DEVICES", deviceIDs)``; read, not run).
    * Labels and taint: Suanchi's own (same style as ``cambricon-mlu``).
    """

    vendor = VENDOR
    display_name = "Iluvatar CoreX"
    device_kind = "gpu"
    resource_name = "iluvatar.com/gpu"
    visible_devices_env = "IX_VISIBLE_DEVICES"
    accelerator_label = "iluvatar-gpu"
    brand_label = "iluvatar"
    model_label_key = "gpu-model"
    parsers = PARSERS
