"""MetaX (沐曦) GPUs: the ``mx-smi`` parser.

``mx-smi`` (MetaX MACA driver) prints a version line, a ``MetaX System Management Interface Log``
rule with ``Timestamp`` and ``Attached GPUs : <n>``, then a boxed table, two lines per card
(sample: PaddlePaddle/ERNIE docs/devices/README_METAX_GPU.md, tests/inventory/fixtures/SOURCES.md)::

    | MX-SMI 2.2.4                        Kernel Mode Driver Version: 2.15.9          |
    | MACA Version: 2.32.0.6              BIOS Version: 1.25.1.0                      |
    |------------------------------------+---------------------+----------------------+
    | GPU         NAME                   | Bus-id              | GPU-Util             |
    | Temp        Pwr:Usage/Cap          | Memory-Usage        | GPU-State            |
    |====================================+=====================+======================|
    | 0           MetaX C550             | 0000:0f:00.0        | 0%                   |
    | 29C         53W / 450W             | 858/65536 MiB       | Available            |
    +------------------------------------+---------------------+----------------------+

then a ``Process:`` box. mx-smi prints no UUID or serial number (None). ``Attached GPUs`` must
match the cards listed, so an output cut between two cards is refused as truncated.
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
    pci_bus_id_cell,
)

VENDOR = "metax"
KIND = "mx-smi"

# What ``--kind auto`` looks for (apps/inventory/vendors/__init__.py).
SIGNATURE = re.compile(r"MetaX System Management Interface Log|^\|\s*MX-SMI\s+\d", re.MULTILINE)

HEADER = re.compile(r"\|\s*GPU\s+NAME\b")
HEADER_TEXT = "| GPU  NAME | Bus-id | GPU-Util |"
TOOL = "MetaX mx-smi"
_BANNER = re.compile(r"\|\s*MX-SMI\s+(?P<smi>\S+)\s+Kernel Mode Driver Version:\s*(?P<driver>\S+)")
_MACA = re.compile(r"MACA Version:\s*(?P<maca>\S+)(?:\s+BIOS Version:\s*(?P<bios>\S+))?")
_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(?P<count>\d+)\s*$")
_POWER = re.compile(r"(?P<usage>\S+?)\s*W?(?:\s*/\s*(?P<cap>\S+?)\s*W?)?")
_MEMORY = re.compile(r"(?P<used>\d+)\s*/\s*(?P<total>\d+)\s*MiB")


def parse_mx_smi(text: str) -> ParsedReport:
    lines = text_lines(text, kind=KIND)
    report = ParsedReport(vendor=VENDOR, kind=KIND)
    attached = None
    for n, line in enumerate(lines, start=1):
        if match := _BANNER.match(line.strip()):
            report.node["smi_version"], report.node["driver_version"] = match["smi"], match["driver"]
        elif match := _MACA.search(line):
            # "unknown" inside a container without the SDK; the BIOS version is printed once, not per card.
            report.node["maca_version"] = None if match["maca"] == "unknown" else na(match["maca"])
            report.node["bios_version"] = na(match["bios"])
        elif match := _ATTACHED.match(line.strip()):
            attached = (n, int(match["count"]))
    report.devices, table = card_devices(
        lines, kind=KIND, header=HEADER, header_text=HEADER_TEXT, tool=TOOL, rows=2, card=_card
    )
    if attached is not None and attached[1] != len(report.devices):
        fail_line(
            table.end_line,
            _("'Attached GPUs : %(count)d' (line %(line)d) but the table lists %(listed)d cards: truncated")
            % {"count": attached[1], "line": attached[0], "listed": len(report.devices)},
            kind=KIND,
        )
    return report


def _card(block: list[CardRow]) -> ParsedDevice:
    first, second = block
    index, name = card_index_and_name(first, kind=KIND)
    temp_power = second.cells[0].split(maxsplit=1)
    power = _POWER.fullmatch(temp_power[1].strip()) if len(temp_power) == 2 else None
    memory = _MEMORY.fullmatch(second.cells[1])
    if power is None or memory is None:
        fail_line(
            second.lineno,
            _("expected '<temp>C <usage>W / <cap>W | <used>/<total> MiB' on the second line of GPU %(index)s")
            % {"index": index},
            kind=KIND,
            text=second.line,
        )
    try:
        temperature = parse_number(temp_power[0], "C")
        util = parse_number(first.cells[2], "%")
        power_w, cap = parse_number(power["usage"]), parse_number(power["cap"])
        used, total = parse_int(memory["used"]), parse_int(memory["total"])
    except ValueError as exc:
        fail_line(
            second.lineno,
            _("GPU %(index)s: %(value)r is not a number") % {"index": index, "value": str(exc)},
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
        temperature_c=temperature,
        power_w=power_w,
        extra={"power_cap_w": cap, "gpu_state": na(second.cells[2])},
    )


PARSERS = {KIND: parse_mx_smi}


class MetaxAdapter(VendorAdapter):
    """MetaX (沐曦) GPUs, whole cards through MetaX's device plugin.

    * ``metax-tech.com/gpu``: the default of HAMi's ``--metax-name`` (Project-HAMi/HAMi@4707fb02
      pkg/device/metax/config.go; charts/hami/templates/scheduler/device-configmap.yaml
      ``resourceCountName``; examples/metax/gpu/default_use.yaml requests it). HAMi's sGPU shares are
      ``metax-tech.com/sgpu`` + ``vcore`` + ``vmemory`` (same config.go); not rendered here.
    * ``MACA_VISIBLE_DEVICES``: not documented by MetaX in any source found; read (not run) in public
      framework code that drives MetaX cards (Ray's MetaX accelerator manager: "MetaX reads
      MACA_VISIBLE_DEVICES"; FlagTree's backend table). Suanchi only strips it from a job's env.
    * Labels and taint: Suanchi's own (same style as ``cambricon-mlu``); MetaX's operator labels nodes
      ``metax-tech.com/gpu.installed`` (seen in public ``kubectl get nodes --show-labels`` output),
      which Suanchi does not set.
    """

    vendor = VENDOR
    display_name = "MetaX"
    device_kind = "gpu"
    resource_name = "metax-tech.com/gpu"
    visible_devices_env = "MACA_VISIBLE_DEVICES"
    accelerator_label = "metax-gpu"
    brand_label = "metax"
    model_label_key = "gpu-model"
    parsers = PARSERS
