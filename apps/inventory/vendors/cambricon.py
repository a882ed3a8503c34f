"""Cambricon MLU: adapter facts and the ``cnmon`` / ``cnmon info`` parsers.

``cnmon`` (CNMon's default table; layout as printed in Cambricon's driver user guide and the
PaddlePaddle MLU install guide, docs/guides/hardware_support/mlu) is a boxed table, two lines per card::

    | CNMON v5.10.22                                               Driver v5.10.22 |
    +-------------------------------+----------------------+-----------------------+
    | Card  VF  Name       Firmware |               Bus-Id | Util        Ecc-Error |
    | Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | Mode     Compute-Mode |
    |===============================+======================+=======================|
    | 0     /   MLU370-X8    v1.1.6 |         0000:13:00.0 | 0%                  0 |
    |  0%   28C        107 W/ 250 W |     0 MiB/ 20638 MiB | FULL          Default |
    +-------------------------------+----------------------+-----------------------+

then a ``Processes:`` box. CNMon 4.x prints ``Inited  Driver`` instead of ``Bus-Id`` (the driver
version per card, no bus id) and ``vMemory-Usage`` in the third column of the second line; newer
releases print ``SR-IOV`` instead of ``Mode``. Columns are told apart by the header words.

``cnmon info`` prints one ``Card <n>`` block per card of indented ``Key : value`` lines; a key with
an empty value opens a nested section (``Physical Memory Usage :`` then ``Total : 23308 MiB``).
A section with no entries is a fact, not damage: an idle card's ``Processes :`` is empty. Only a
section left open at the very end of the output (other than ``Processes``) means it was cut short::

    Card 0
        Product Name                   : MLU370-X4
        UUID                           : 77013006-2457-0000-0000-000000000000
        Firmware                       : v1.1.6
        Driver                         : v5.10.22
        Physical Memory Usage          :
            Total                      : 23308 MiB
        PCI                            :
            Domain ID                  : 0000
            Bus num                    : 01
            Device                     : 00
            Function                   : 0

Memory is printed in MiB. Keys the parser does not use are ignored; keys a card does not print stay
unknown (None).
"""

from __future__ import annotations

import re
from typing import Any

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

VENDOR = "cambricon"
KIND = "cnmon"
KIND_INFO = "cnmon-info"

_BANNER = re.compile(r"\|\s*CNMON\s+v(?P<smi>\S+)(?:\s+Driver\s+v(?P<driver>\S+))?\s*\|", re.IGNORECASE)
_RULE = re.compile(r"\+[-=+]+\+|\|[=+]+\|")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


# ===================================================================================================
# cnmon
# ===================================================================================================


def parse_cnmon(text: str) -> ParsedReport:
    kind = KIND
    lines = text_lines(text, kind=kind)
    report = ParsedReport(vendor=VENDOR, kind=kind)
    banner_no = None
    for n, line in enumerate(lines, start=1):
        match = _BANNER.fullmatch(line.strip())
        if match:
            report.node["smi_version"] = match["smi"]
            report.node["driver_version"] = match["driver"]
            banner_no = n
            break
    if banner_no is None:
        first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
        fail_line(
            first,
            _("no '| CNMON v<version> ... |' banner; is this cnmon output?"),
            kind=kind,
            text=lines[first - 1],
        )

    head1 = next(
        (n for n in range(banner_no + 1, len(lines) + 1) if lines[n - 1].strip().startswith("| Card")), None
    )
    if head1 is None or head1 + 1 > len(lines):
        fail_line(
            len(lines),
            _("no '| Card  VF  Name  Firmware | ...' header after the banner (truncated?)"),
            kind=kind,
        )
    first_header = _cells(lines[head1 - 1])
    second_header = _cells(lines[head1])
    if len(first_header) != 3 or len(second_header) != 3 or not second_header[0].startswith("Fan"):
        fail_line(
            head1,
            _("expected the two header lines 'Card VF Name Firmware | ... | ...'"),
            kind=kind,
            text=lines[head1 - 1],
        )
    has_bus = "Bus-Id" in first_header[1]
    has_vmemory = "vMemory" in second_header[2]

    devices: dict[int, ParsedDevice] = {}
    card_line: dict[int, int] = {}
    pending: tuple[int, dict[str, Any]] | None = None
    closed = True
    n = head1 + 2
    while n <= len(lines):
        line = lines[n - 1]
        stripped = line.strip()
        if not stripped:
            if pending is not None:
                break
            if devices:
                n += 1
                break  # the card table is over
            n += 1
            continue
        if _RULE.fullmatch(stripped):
            if pending is None:
                closed = True
            n += 1
            continue
        cells = _cells(line)
        if not stripped.startswith("|") or len(cells) != 3:
            fail_line(n, _("expected a '| ... | ... | ... |' card line"), kind=kind, text=line)
        if pending is None:
            pending = (n, _card_line(cells, n, line, has_bus))
            closed = False
        else:
            device = _card_second_line(cells, n, line, pending[1], has_vmemory)
            if device.index in devices:
                fail_line(
                    n,
                    _("card %(index)s already listed on line %(line)s")
                    % {"index": device.index, "line": card_line[device.index]},
                    kind=kind,
                    text=line,
                )
            devices[device.index] = device
            card_line[device.index] = pending[0]
            pending = None
        n += 1
    if pending is not None:
        fail_line(
            pending[0] + 1,
            _("card %(index)s has no second line (Fan Temp Pwr ...): truncated output")
            % {"index": pending[1]["index"]},
            kind=kind,
        )
    if not devices:
        fail_line(min(n, len(lines)), _("the table lists no card"), kind=kind)
    if not closed:
        fail_line(
            len(lines),
            _("the card table is not closed by a '+---+' rule: the output is truncated"),
            kind=kind,
        )

    drivers = {d.extra.pop("driver") for d in devices.values() if d.extra.get("driver")}
    if report.node["driver_version"] is None and drivers:
        report.node["driver_version"] = sorted(drivers)[0]
        if len(drivers) > 1:
            report.warnings.append(f"cards report different drivers: {', '.join(sorted(drivers))}")
    report.devices = [devices[i] for i in sorted(devices)]
    return report


def _card_line(cells: list[str], lineno: int, line: str, has_bus: bool) -> dict[str, Any]:
    words = cells[0].split()
    if len(words) < 4 or not words[0].isdigit():
        fail_line(
            lineno,
            _("expected '<card> <VF> <name> <firmware>' in the first cell, got %(cells)r")
            % {"cells": cells[0]},
            kind=KIND,
            text=line,
        )
    values: dict[str, Any] = {
        "index": int(words[0]),
        "vf": words[1],
        "name": " ".join(words[2:-1]),
        "firmware": na(words[-1]),
    }
    if has_bus:
        try:
            values["pci_bus_id"] = normalise_pci_bus_id(cells[1])
        except ValueError:
            fail_line(
                lineno, _("Bus-Id %(cells)r is not a PCI bus id") % {"cells": cells[1]}, kind=KIND, text=line
            )
    else:
        inited = cells[1].split()
        values["inited"] = inited[0] if inited else None
        values["driver"] = inited[-1].lstrip("v") if len(inited) > 1 else None
    util = cells[2].split()
    if len(util) != 2:
        fail_line(
            lineno,
            _("expected '<Util> <Ecc-Error>' in the third cell, got %(cells)r") % {"cells": cells[2]},
            kind=KIND,
            text=line,
        )
    try:
        values["util"] = parse_number(util[0], "%")
        values["ecc"] = parse_int(util[1])
    except ValueError:
        fail_line(
            lineno,
            _("Util / Ecc-Error: %(cells)r is not '<n>%% <count>'") % {"cells": cells[2]},
            kind=KIND,
            text=line,
        )
    return values


_POWER = re.compile(r"(?P<usage>\S+)\s*W?\s*/\s*(?P<cap>\S+)\s*W", re.IGNORECASE)
_MEMORY = re.compile(r"(?P<used>\S+)\s*MiB\s*/\s*(?P<total>\S+)\s*MiB", re.IGNORECASE)


def _card_second_line(
    cells: list[str], lineno: int, line: str, card: dict[str, Any], has_vmemory: bool
) -> ParsedDevice:
    words = cells[0].split(maxsplit=2)
    power = _POWER.fullmatch(words[2]) if len(words) == 3 else None
    memory = _MEMORY.fullmatch(cells[1])
    if power is None:
        fail_line(
            lineno,
            _("expected '<fan>%% <temp>C <usage> W/ <cap> W' in the first cell, got %(cells)r")
            % {"cells": cells[0]},
            kind=KIND,
            text=line,
        )
    if memory is None:
        fail_line(
            lineno,
            _("expected '<used> MiB/ <total> MiB' in the second cell, got %(cells)r") % {"cells": cells[1]},
            kind=KIND,
            text=line,
        )
    try:
        fan = parse_number(words[0], "%")
        temperature = parse_number(words[1], "C")
        power_w = parse_number(power["usage"])
        power_cap = parse_number(power["cap"])
        used = parse_int(memory["used"])
        total = parse_int(memory["total"])
    except ValueError:
        fail_line(
            lineno,
            _("a value on the second line of card %(index)s is not a number") % {"index": card["index"]},
            kind=KIND,
            text=line,
        )
    extra: dict[str, Any] = {
        "vf": card["vf"],
        "fan_pct": fan,
        "power_cap_w": power_cap,
        "ecc_errors": card["ecc"],
    }
    if "driver" in card:
        extra["driver"] = card["driver"]
        extra["inited"] = card["inited"]
    third = cells[2].split()
    if has_vmemory:
        extra["virtual_memory"] = na(cells[2])
    elif len(third) == 2:
        extra["mode"], extra["compute_mode"] = na(third[0]), na(third[1])
    ecc = card["ecc"]
    return ParsedDevice(
        index=card["index"],
        model_name=card["name"] or None,
        memory_mib=total,
        pci_bus_id=card.get("pci_bus_id"),
        firmware_version=card["firmware"],
        health=None if ecc is None else ("degraded" if ecc > 0 else "healthy"),
        health_detail=f"Ecc-Error: {ecc}" if ecc else None,
        utilization_pct=card["util"],
        memory_used_mib=used,
        temperature_c=temperature,
        power_w=power_w,
        extra=extra,
    )


# ===================================================================================================
# cnmon info
# ===================================================================================================

_CARD_HEAD = re.compile(r"Card\s+(\d+)")
_KEY_VALUE = re.compile(r"(?P<key>[^:]+?)\s*:\s*(?P<value>.*)")
_INFO_BANNER = re.compile(r"=*\s*CNMON\s+v(?P<smi>\S+)\s*=*", re.IGNORECASE)
_PROCESS_COUNT = "#processes"  # not a cnmon key: the number of "Process" entries under "Processes"


def parse_cnmon_info(text: str) -> ParsedReport:
    kind = KIND_INFO
    lines = text_lines(text, kind=kind)
    report = ParsedReport(vendor=VENDOR, kind=kind)
    cards: list[tuple[int, int, dict[str, Any]]] = []  # (index, line, flat "Section/Key" -> value)
    stack: list[tuple[int, str]] = []  # (indent, section name)
    open_section: tuple[int, str, int] | None = None  # (line, name, indent) waiting for a child
    current: dict[str, Any] | None = None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if current is None:
            banner = _INFO_BANNER.fullmatch(stripped)
            if banner is not None:
                report.node["smi_version"] = banner["smi"]
                continue
        head = _CARD_HEAD.fullmatch(stripped)
        if head is not None and indent == 0:
            open_section = None  # an empty section before the next card is a fact, not damage
            current = {}
            cards.append((int(head.group(1)), n, current))
            stack = []
            continue
        if current is None:
            fail_line(
                n,
                _("expected 'Card <n>' before the first key; is this cnmon info output?"),
                kind=kind,
                text=line,
            )
        match = _KEY_VALUE.fullmatch(stripped)
        if match is None:
            fail_line(n, _("expected '<key> : <value>'"), kind=kind, text=line)
        open_section = None  # a section followed by a sibling key is empty: a fact, not damage
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, value = match["key"].strip(), match["value"].strip()
        path = "/".join([name for _, name in stack] + [key])
        if value == "":
            stack.append((indent, key))
            open_section = (n, key, indent)
            current.setdefault(path, "")
            continue
        if path == "Processes/Process":
            current[_PROCESS_COUNT] = current.get(_PROCESS_COUNT, 0) + 1
        current.setdefault(path, value)
    if open_section is not None and open_section[1] != "Processes":
        fail_line(
            open_section[0],
            _("section %(open_section)r has no entries: the output is truncated")
            % {"open_section": open_section[1]},
            kind=kind,
        )
    if not cards:
        fail_line(len(lines), _("no 'Card <n>' block; is this cnmon info output?"), kind=kind)

    seen: dict[int, int] = {}
    for index, lineno, values in cards:
        if index in seen:
            fail_line(
                lineno,
                _("card %(index)s already listed on line %(line)s") % {"index": index, "line": seen[index]},
                kind=kind,
                text=lines[lineno - 1],
            )
        seen[index] = lineno
        report.devices.append(_info_device(index, lineno, values, report))
    report.devices.sort(key=lambda d: d.index)
    return report


def _info_device(index: int, lineno: int, values: dict[str, Any], report: ParsedReport) -> ParsedDevice:
    kind = KIND_INFO

    def get(*paths: str) -> str | None:
        for path in paths:
            if path in values:
                return na(values[path])
        return None

    def number(path: str, unit: str) -> float | None:
        raw = get(path)
        try:
            return parse_number(raw, unit)
        except ValueError:
            fail_line(
                lineno,
                _("card %(index)s: %(path)s %(raw)r is not '<n> %(unit)s'")
                % {"index": index, "path": path, "raw": raw, "unit": unit},
                kind=kind,
            )

    pci_bus_id = None
    domain, bus, dev, fn = (get(f"PCI/{k}") for k in ("Domain ID", "Bus num", "Device", "Function"))
    if bus is not None and dev is not None and fn is not None:
        raw = f"{domain or '0'}:{bus}:{dev}.{fn}"
        try:
            pci_bus_id = normalise_pci_bus_id(raw)
        except ValueError:
            fail_line(
                lineno,
                _("card %(index)s: PCI %(raw)r is not a PCI bus id") % {"index": index, "raw": raw},
                kind=kind,
            )
    driver = get("Driver")
    if driver:
        driver = driver.lstrip("v")
        if report.node["driver_version"] and report.node["driver_version"] != driver:
            report.warnings.append(f"card {index}: driver {driver} differs from earlier cards")
        report.node["driver_version"] = report.node["driver_version"] or driver
    health_state = get("Health State/Device")
    health = detail = None
    if health_state is not None:
        health = "healthy" if health_state.lower() == "good" else "degraded"
        detail = None if health == "healthy" else f"Health State: {health_state}"
    total = number("Physical Memory Usage/Total", "MiB")
    used = number("Physical Memory Usage/Used", "MiB")
    temperature = number("Temperature/Chip", "C")
    if temperature is None:
        temperature = number("Temperature/Board", "C")
    return ParsedDevice(
        index=index,
        uuid=get("UUID"),
        serial=get("Serial Number", "SN"),
        model_name=get("Product Name"),
        memory_mib=None if total is None else int(total),
        pci_bus_id=pci_bus_id,
        firmware_version=get("Firmware"),
        health=health,
        health_detail=detail,
        utilization_pct=number("Utilization/MLU Average", "%"),
        memory_used_mib=None if used is None else int(used),
        temperature_c=temperature,
        power_w=number("Power/Usage", "W"),
        extra={
            "compute_mode": get("Compute Mode"),
            "power_cap_w": number("Power/Cap", "W"),
            "temperature_board_c": number("Temperature/Board", "C"),
            # An idle card prints an empty "Processes" section: 0; a card without the section: unknown.
            "process_count": values.get(_PROCESS_COUNT, 0) if "Processes" in values else None,
        },
    )


# ===================================================================================================
# Adapter
# ===================================================================================================


class CambriconAdapter(VendorAdapter):
    vendor = "cambricon"
    display_name = "Cambricon"
    device_kind = "mlu"
    resource_name = "cambricon.com/mlu"
    visible_devices_env = "MLU_VISIBLE_DEVICES"
    # Not in seed 004; invented in the same style as nvidia-gpu / hygon-dcu.
    accelerator_label = "cambricon-mlu"
    brand_label = "cambricon"
    model_label_key = "mlu-model"
    parsers = {KIND: parse_cnmon, KIND_INFO: parse_cnmon_info}
