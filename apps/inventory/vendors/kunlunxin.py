"""Kunlunxin (昆仑芯) XPUs: the ``xpu-smi`` parser (P800 generation layout).

``xpu-smi`` (also installed as ``xpu_smi``) prints the date and an nvidia-smi-style boxed table,
three lines per card (sample: PaddlePaddle/ERNIE docs/devices/README_XPU.md, driver 5.0.21.21;
tests/inventory/fixtures/SOURCES.md)::

    | XPU-SMI               Driver Version: 5.0.21.21    XPU-RT Version: 5.0.21   |
    |-------------------------------+----------------------+----------------------+
    | XPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
    | Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | XPU-Util  Compute M. |
    |                               |             L3-Usage |            SR-IOV M. |
    |===============================+======================+======================|
    |   0  P800 OAM           N/A   | 00000000:03:00.0 N/A |                    0 |
    | N/A   37C  N/A     88W / 400W |      0MiB / 98304MiB |      0%      Default |
    |                               |      0MiB /    96MiB |             Disabled |
    +-------------------------------+----------------------+----------------------+

then a ``Processes:`` box; an output without it stopped after a card and is refused as truncated.
The older R200/R300 tool prints a different ``DevID | PCI Addr | Model | SN`` listing, which this
parser does not read (it is refused naming its header). No UUID or serial number here (None).
Intel's tool of the same name prints "Intel(R) XPU System Management Interface" and is not this.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext as _

from .adapter import VendorAdapter, fail_line, na, parse_int, parse_number, text_lines
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

VENDOR = "kunlunxin"
KIND = "xpu-smi"

# What ``--kind auto`` looks for (apps/inventory/vendors/__init__.py).
SIGNATURE = re.compile(r"^\|\s*XPU-SMI\s+Driver Version:\s*\S+\s+XPU-RT Version:", re.MULTILINE)

HEADER = re.compile(r"\|\s*XPU\s+Name\b")
HEADER_TEXT = "| XPU  Name  Persistence-M | Bus-Id  Disp.A | Volatile Uncorr. ECC |"
TOOL = "Kunlunxin xpu-smi"
_BANNER = re.compile(r"\|\s*XPU-SMI\s+Driver Version:\s*(?P<driver>\S+)\s+XPU-RT Version:\s*(?P<rt>\S+)")


def parse_xpu_smi(text: str) -> ParsedReport:
    lines = text_lines(text, kind=KIND)
    report = ParsedReport(vendor=VENDOR, kind=KIND)
    banner = next((m for line in lines if (m := _BANNER.match(line.strip()))), None)
    if banner is not None:
        report.node["driver_version"] = banner["driver"]
        report.node["xpu_rt_version"] = na(banner["rt"])
    report.devices, table = card_devices(
        lines, kind=KIND, header=HEADER, header_text=HEADER_TEXT, tool=TOOL, rows=3, card=_card
    )
    require_processes_box(lines, table, kind=KIND)
    return report


def _card(block: list[CardRow]) -> ParsedDevice:
    first, second, third = block
    index, name = card_index_and_name(first, kind=KIND, drop_last=True)  # last word: Persistence-M
    values = fan_temp_perf_power(second, kind=KIND)
    used, total = used_total_mib(second, 1, kind=KIND)
    l3_used, l3_total = used_total_mib(third, 1, kind=KIND)
    bus = first.cells[1].split()
    util_mode = second.cells[2].split()
    try:
        ecc = parse_int(first.cells[2])
        util = parse_number(util_mode[0] if util_mode else None, "%")
    except ValueError:
        fail_line(
            first.lineno,
            _("XPU %(index)s: ECC %(ecc)r / XPU-Util %(util)r are not numbers")
            % {"index": index, "ecc": first.cells[2], "util": second.cells[2]},
            kind=KIND,
            text=first.line,
        )
    return ParsedDevice(
        index=index,
        model_name=name,
        memory_mib=total,
        memory_used_mib=used,
        pci_bus_id=pci_bus_id_cell(first, bus[0] if bus else "", kind=KIND),
        health=None if ecc is None else ("degraded" if ecc > 0 else "healthy"),
        health_detail=f"Volatile Uncorr. ECC: {ecc}" if ecc else None,
        utilization_pct=util,
        temperature_c=values["temperature_c"],
        power_w=values["power_w"],
        extra={
            "fan_pct": values["fan_pct"],
            "perf": values["perf"],
            "power_cap_w": values["power_cap_w"],
            "compute_mode": na(util_mode[1]) if len(util_mode) > 1 else None,
            "l3_used_mib": l3_used,
            "l3_total_mib": l3_total,
            "sriov_mode": na(third.cells[2]),
            "ecc_errors": ecc,
        },
    )


PARSERS = {KIND: parse_xpu_smi}


class KunlunxinAdapter(VendorAdapter):
    """Kunlunxin (昆仑芯) XPUs, whole cards.

    * ``kunlunxin.com/xpu``: the default of HAMi's ``--kunlun-name`` (Project-HAMi/HAMi@4707fb02
      pkg/device/kunlun/config.go; charts/hami/values.yaml ``kunlunResourceName``). HAMi's vXPU
      shares are ``kunlunxin.com/vxpu`` + ``kunlunxin.com/vxpu-memory`` (same file); not rendered here.
    * ``XPU_VISIBLE_DEVICES``: the variable Kunlunxin's XRE runtime reads, as Baidu's own deployment
      guides set it (PaddlePaddle/FastDeploy docs/zh/usage/kunlunxin_xpu_deployment.md
      ``export XPU_VISIBLE_DEVICES="0,1,2,3,4,5,6,7"``).
    * Labels and taint: Suanchi's own (same style as ``cambricon-mlu``).
    """

    vendor = VENDOR
    display_name = "Kunlunxin XPU"
    # DeviceKind has no "xpu": the XPU is a non-GPU AI ASIC, filed with the NPUs (no new choice, no migration).
    device_kind = "npu"
    resource_name = "kunlunxin.com/xpu"
    visible_devices_env = "XPU_VISIBLE_DEVICES"
    accelerator_label = "kunlunxin-xpu"
    brand_label = "kunlunxin"
    model_label_key = "xpu-model"
    parsers = PARSERS
