"""Enflame (燧原) GCUs: the ``efsmi`` parser.

``efsmi`` prints an ``Enflame System Management Interface`` banner of dashes, then a boxed
table, two lines per card (sample: PaddlePaddle/docs docs/hardware_support/gcu/install_cn.md,
EFSMI V1.2.0.301 with two S60 cards; tests/inventory/fixtures/SOURCES.md)::

    |EFSMI    V1.2.0.301       Driver Ver: 1.2.0.301                           |
    |--------------------------------------------------------------------------|
    | DEV    NAME                | FW VER          | BUS-ID      ECC           |
    | TEMP   Dpm   Pwr(Usage/Cap)| Mem     GCU Virt| DUsed       SN            |
    |--------------------------------------------------------------------------|
    | 0      S60                 | 33.6.2          | 00:01:00.0  Disable       |
    | 39 C   Sleep    105W  300W | 49120MiB Disable|   0.0%      A073640510015 |
    +--------------------------------------------------------------------------+

``Mem`` is the card's memory size (no used amount), ``DUsed`` the device utilisation, ``SN`` the
serial number. ``BUS-ID`` has no PCI domain; it is stored as domain 0000 (as for any bus id
printed without one). efsmi prints no UUID in this view (None) and nothing after the table, so an
output cut exactly between two cards cannot be told from a complete one.
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

VENDOR = "enflame"
KIND = "efsmi"

# What ``--kind auto`` looks for (apps/inventory/vendors/__init__.py).
SIGNATURE = re.compile(r"Enflame System Management Interface|^\|\s*EFSMI:?\s+V?\d", re.MULTILINE)

HEADER = re.compile(r"\|\s*DEV\s+NAME\b")
HEADER_TEXT = "| DEV  NAME | FW VER | BUS-ID  ECC |"
TOOL = "Enflame efsmi"
_BANNER = re.compile(r"\|\s*EFSMI:?\s+V?(?P<smi>\S+)\s+Driver Ver:\s*(?P<driver>\S+)")
_SECOND = re.compile(
    r"(?P<temp>\S+?)\s*(?:C|℃)?\s+(?P<dpm>\S+)\s+(?P<usage>\S+?)W?(?:\s*/?\s+(?P<cap>\S+?)W?)?"
)
_MEMORY = re.compile(r"(?P<total>\d+)\s*MiB(?:\s+(?P<virt>\S+))?")


def parse_efsmi(text: str) -> ParsedReport:
    lines = text_lines(text, kind=KIND)
    report = ParsedReport(vendor=VENDOR, kind=KIND)
    banner = next((m for line in lines if (m := _BANNER.match(line.strip()))), None)
    if banner is not None:
        report.node["smi_version"], report.node["driver_version"] = banner["smi"], banner["driver"]
    report.devices, table = card_devices(
        lines, kind=KIND, header=HEADER, header_text=HEADER_TEXT, tool=TOOL, rows=2, card=_card
    )
    return report


def _card(block: list[CardRow]) -> ParsedDevice:
    first, second = block
    index, name = card_index_and_name(first, kind=KIND)
    bus_ecc = first.cells[2].split()
    values = _SECOND.fullmatch(second.cells[0])
    memory = _MEMORY.fullmatch(second.cells[1])
    used_sn = second.cells[2].split()
    if values is None or memory is None or len(used_sn) != 2:
        fail_line(
            second.lineno,
            _(
                "expected '<temp> C <Dpm> <usage>W <cap>W | <Mem>MiB <GCU Virt> | <DUsed>%% <SN>' on card %(index)s"
            )
            % {"index": index},
            kind=KIND,
            text=second.line,
        )
    try:
        temperature = parse_number(values["temp"])
        power_w, cap = parse_number(values["usage"]), parse_number(values["cap"])
        util = parse_number(used_sn[0], "%")
        total = parse_int(memory["total"])
    except ValueError as exc:
        fail_line(
            second.lineno,
            _("card %(index)s: %(value)r is not a number") % {"index": index, "value": str(exc)},
            kind=KIND,
            text=second.line,
        )
    return ParsedDevice(
        index=index,
        serial=na(used_sn[1]),
        model_name=name,
        memory_mib=total,
        pci_bus_id=pci_bus_id_cell(first, bus_ecc[0] if bus_ecc else "", kind=KIND),
        firmware_version=na(first.cells[1]),
        utilization_pct=util,
        temperature_c=temperature,
        power_w=power_w,
        extra={
            "ecc": na(bus_ecc[1]) if len(bus_ecc) > 1 else None,
            "dpm": na(values["dpm"]),
            "power_cap_w": cap,
            "gcu_virt": na(memory["virt"]),
        },
    )


PARSERS = {KIND: parse_efsmi}


class EnflameAdapter(VendorAdapter):
    """Enflame (燧原) GCUs, whole cards.

    * ``enflame.com/gcu``: the default of HAMi's ``--enflame-gcu-resource-name`` (Project-HAMi/HAMi@4707fb02
      pkg/device/enflame/config.go, "enflame gcu resource name"; examples/enflame/gcu_use.yaml requests
      ``enflame.com/gcu: 1``). HAMi's shares are ``enflame.com/drs-gcu`` (+ ``gcu-memory`` /
      ``gcu-core``) and the legacy ``enflame.com/vgcu``; not rendered here.
    * ``ENFLAME_VISIBLE_DEVICES``: what a device plugin's Allocate sets for the cards it gave
      (openi.pcl.ac.cn/Kraken/KrakenPlug, enflame device: ``r.Envs["ENFLAME_VISIBLE_DEVICES"]``) and
      what Enflame's container guides pass to ``docker run -e`` (read, not run).
    * Labels and taint: Suanchi's own (same style as ``cambricon-mlu``).
    """

    vendor = VENDOR
    display_name = "Enflame GCU"
    # DeviceKind has no "gcu": the GCU is a non-GPU AI ASIC, filed with the NPUs (no new choice, no migration).
    device_kind = "npu"
    resource_name = "enflame.com/gcu"
    visible_devices_env = "ENFLAME_VISIBLE_DEVICES"
    accelerator_label = "enflame-gcu"
    brand_label = "enflame"
    model_label_key = "gcu-model"
    parsers = PARSERS
