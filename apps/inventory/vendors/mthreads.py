"""Moore Threads (摩尔线程) GPUs: the ``mthreads-gmi`` parser.

``mthreads-gmi`` (run without arguments) prints a date line, a banner between dash rules, a three-line
column header, then three lines per card, each card closed by a ``+---+`` rule. The only public
sample found is the one a Moore Threads engineer posted in vllm-project/vllm-omni pull request #2337
("[Feat] Add MUSA platform support for Moore Threads GPUs", 2026-03-31; mthreads-gmi 2.3.2, driver
3.3.5-server, MTT S5000); tests/inventory/fixtures/mthreads_gmi_s5000_excerpt.txt holds its first
two cards verbatim (SOURCES.md)::

    ---------------------------------------------------------------------
        mthreads-gmi:2.3.2           Driver Version:3.3.5-server
    ---------------------------------------------------------------------
    ID   Name                 |PCIe                |%GPU  Mem
         Device Type   Perf   |Pcie Lane Width     |Temp  MPC Capable
                                                   |      ECC Mode
    +-------------------------------------------------------------------+
    0    MTT S5000            |00000000:2a:00.0    |0%    66641MiB(81920MiB)
         Physical      P0     |16x(16x)            |52C   YES
                                                   |      On-die, EDC
    +-------------------------------------------------------------------+

``Mem`` is ``<used>MiB(<total>MiB)``. The view prints no UUID, serial number or power (None). What
follows the card table in a full output (a process list?) is not in the public sample: parsing stops
at the first line after a rule that is not a card. The tool prints no card count, so an output cut
exactly after a card's closing rule cannot be told from a complete one; a card cut before its rule is
refused as truncated.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext as _

from .adapter import (
    VendorAdapter,
    fail_line,
    na,
    normalise_pci_bus_id,
    parse_int,
    parse_number,
    text_lines,
)
from .base import ParsedDevice, ParsedReport

VENDOR = "mthreads"
KIND = "mthreads-gmi"

# What ``--kind auto`` looks for (apps/inventory/vendors/__init__.py): the banner only this tool prints.
SIGNATURE = re.compile(r"^\s*mthreads-gmi:\s*\S+\s+Driver Version:", re.MULTILINE | re.IGNORECASE)
HEADER = re.compile(r"^ID\s+Name\s*\|\s*PCIe\s*\|\s*%GPU\s+Mem\b", re.MULTILINE)
HEADER_TEXT = "ID  Name |PCIe |%GPU  Mem"
TOOL = "Moore Threads mthreads-gmi"

_BANNER = re.compile(r"mthreads-gmi:\s*(?P<smi>\S+)\s+Driver Version:\s*(?P<driver>\S+)", re.IGNORECASE)
_RULE = re.compile(r"^\+-+\+$")
_FIRST = re.compile(
    r"^(?P<index>\d+)\s+(?P<name>\S.*?)\s*\|(?P<bus>[^|]*)\|\s*(?P<util>\S+?)%?\s+"
    r"(?P<used>\d+)MiB\((?P<total>\d+)MiB\)$"
)
_SECOND = re.compile(
    r"^(?P<type>\S.*?)\s+(?P<perf>\S+)\s*\|(?P<lanes>[^|]*)\|\s*(?P<temp>\S+?)C?\s+(?P<mpc>\S+)$"
)
_THIRD = re.compile(r"^\|\s*(?P<ecc>.*)$")


def parse_mthreads_gmi(text: str) -> ParsedReport:
    lines = text_lines(text, kind=KIND)
    report = ParsedReport(vendor=VENDOR, kind=KIND)
    banner = next((m for line in lines if (m := _BANNER.search(line))), None)
    if banner is not None:
        report.node["smi_version"], report.node["driver_version"] = banner["smi"], banner["driver"]
    header = next((n for n, line in enumerate(lines) if HEADER.match(line.strip())), None)
    if header is None:
        fail_line(
            1,
            _("no card table header (%(header)s) found: this is not %(tool)s's default view")
            % {"header": HEADER_TEXT, "tool": TOOL},
            kind=KIND,
        )
    n = header + 3  # the header's two continuation lines
    while n < len(lines) and not _RULE.match(lines[n].strip()):
        n += 1
    while n < len(lines) and _RULE.match(lines[n].strip()):
        n += 1
        first = _FIRST.match(lines[n].strip()) if n < len(lines) else None
        if first is None:
            break  # the end of the card table
        block = lines[n : n + 3]
        if len(block) < 3 or n + 3 >= len(lines) or not _RULE.match(lines[n + 3].strip()):
            fail_line(
                n + 1 + len(block),
                _("card %(index)s is cut before its closing rule: truncated") % {"index": first["index"]},
                kind=KIND,
            )
        report.devices.append(_card(n, first, block))
        n += 3
    if not report.devices:
        fail_line(header + 1, _("the card table lists no card"), kind=KIND)
    return report


def _card(n: int, first: re.Match[str], block: list[str]) -> ParsedDevice:
    second = _SECOND.match(block[1].strip())
    third = _THIRD.match(block[2].strip())
    if second is None or third is None:
        bad = 1 if second is None else 2
        fail_line(
            n + 1 + bad,
            _(
                "expected '<Device Type> <Perf> |<Pcie Lane Width>|<Temp>C <MPC Capable>' and "
                "'|<ECC Mode>' below card %(index)s"
            )
            % {"index": first["index"]},
            kind=KIND,
            text=block[bad],
        )
    try:
        pci = normalise_pci_bus_id(first["bus"].strip())
        util = parse_number(first["util"])
        used, total = parse_int(first["used"]), parse_int(first["total"])
        temperature = parse_number(second["temp"])
    except ValueError as exc:
        fail_line(
            n + 1,
            _("card %(index)s: %(value)r is not a number or PCI bus id")
            % {"index": first["index"], "value": str(exc)},
            kind=KIND,
            text=block[0],
        )
    return ParsedDevice(
        index=int(first["index"]),
        model_name=first["name"],
        memory_mib=total,
        memory_used_mib=used,
        pci_bus_id=pci,
        utilization_pct=util,
        temperature_c=temperature,
        extra={
            "device_type": na(second["type"]),
            "perf": na(second["perf"]),
            "pcie_lane_width": na(second["lanes"]),
            "mpc_capable": na(second["mpc"]),
            "ecc_mode": na(third["ecc"]),
        },
    )


PARSERS = {KIND: parse_mthreads_gmi}


class MthreadsAdapter(VendorAdapter):
    """Moore Threads GPUs: whole cards through Moore Threads' device plugin, slices through HAMi.

    * ``mthreads.com/gpu``: whole cards as the Mthreads GPU Operator's device plugin reports them to
      kubelet; ``mthreads.com/sgpu-core`` (16 per sliced card) and ``mthreads.com/sgpu-memory`` (512 MiB
      units) for cards bound to the vendor's ``sgpu_km`` module (Project-HAMi/website@22ec2772
      docs/installation/how-to-use-mthreads-s5000.md). HAMi asks for a slice as ``mthreads.com/vgpu``
      + ``sgpu-memory`` + ``sgpu-core`` (Project-HAMi/HAMi@4707fb02 pkg/device/mthreads/device.go
      ParseConfig defaults; examples/mthreads/default_use.yaml): apps/clusters/sharing.py.
    * ``MTHREADS_VISIBLE_DEVICES``: set by the Mthreads container runtime for the granted card (same
      HAMi page, "Card index visible inside the container"); FlagOS's MUSA runtime image README passes
      ``--env MTHREADS_VISIBLE_DEVICES=all`` to ``docker run --runtime mthreads``. Suanchi only strips
      it from a job's env.
    * Labels and taint: Suanchi's own (same style as ``metax-gpu``); the operator's own node label
      ``mthreads.com/gpu-node=true`` (same HAMi page) is not set by Suanchi.
    """

    vendor = VENDOR
    display_name = "Moore Threads"
    device_kind = "gpu"
    resource_name = "mthreads.com/gpu"
    visible_devices_env = "MTHREADS_VISIBLE_DEVICES"
    accelerator_label = "mthreads-gpu"
    brand_label = "mthreads"
    model_label_key = "gpu-model"
    parsers = PARSERS
