"""Huawei Ascend: adapter facts and the ``npu-smi info`` parser.

``npu-smi info`` layout (hardware-telemetry.md §2), one table of ``|``-separated cells::

    | npu-smi 23.0.3                   Version: 23.0.3                                               |
    | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    | 0     910B3               | OK            | 93.6        37                0    / 0             |
    | 0                         | 0000:C1:00.0  | 0           0    / 0          3339 / 65536         |

then a process table (``NPU Chip | Process id | Process name | Process memory(MB)``) whose rows are
``No running processes found in NPU <n>`` or ``| 0 0 | 1234 | python | 5600 |``.

Variants handled, told apart by the first cell of the second header line:

* ``Chip`` (Atlas 800 / A2 910, 910B*): one chip per NPU; device index = NPU ID.
* ``Chip Phy-ID`` (A3 / Ascend910_93, newer drivers): every chip gets its own pair of lines, the first
  repeating the NPU ID and name; device index = the chip's physical ID (what ``/dev/davinci<N>`` and
  the device plugin use), ``extra`` keeps ``npu_id`` and ``chip_id``. Board power is printed on the
  first chip only (``-`` on the other).
* ``Chip Device`` (310P / Atlas 300I Duo): device index = the Device (logical) ID.

Without an ``HBM-Usage(MB)`` column (310P) ``memory_mib`` comes from ``Memory-Usage(MB)``.
npu-smi prints memory in "MB"; the values are binary (65536 MB per 64 GB die), so they are stored as MiB.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from .adapter import (
    VendorAdapter,
    diagonal_check,
    fail_line,
    looks_like_pci_bus_id,
    na,
    normalise_pci_bus_id,
    parse_number,
    pix_switch_ids,
    text_lines,
)
from .base import ParsedDevice, ParsedLink, ParsedReport

VENDOR = "huawei"
KIND = "npu-smi"
KIND_TOPO = "npu-smi-topo"

_BANNER = re.compile(r"npu-smi\s+(?P<smi>\S+)\s+Version:\s*(?P<driver>\S+)", re.IGNORECASE)
_NO_PROCESS = re.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
_INT = re.compile(r"\d+")


def parse_npu_smi(text: str) -> ParsedReport:
    lines = text_lines(text, kind=KIND)
    report = ParsedReport(vendor=VENDOR, kind=KIND)

    head2, style, has_hbm = _npu_header(lines, _npu_banner(lines, report))

    n = head2 + 1
    pending: tuple[int, dict[str, Any]] | None = None  # first line of a chip, waiting for its second
    devices: dict[int, ParsedDevice] = {}
    by_npu_chip: dict[tuple[int, int], ParsedDevice] = {}
    index_line: dict[int, int] = {}
    while n <= len(lines):
        line = lines[n - 1]
        stripped = line.strip()
        if not stripped or stripped.startswith("+"):
            n += 1
            continue
        cells = _cells(line)
        if cells and cells[0].split()[:2] == ["NPU", "Chip"]:
            break  # the process table
        if not stripped.startswith("|") or len(cells) < 3:
            fail_line(n, _("expected a '| ... | ... | ... |' device line"), kind=KIND, text=line)
        is_chip_line = looks_like_pci_bus_id(cells[1]) or cells[1].upper() in ("NA", "N/A")
        if pending is None:
            if is_chip_line:
                fail_line(
                    n,
                    _("chip line (Chip | Bus-Id | ...) without the NPU line before it"),
                    kind=KIND,
                    text=line,
                )
            pending = (n, _npu_line(cells, n, line))
        else:
            if not is_chip_line:
                fail_line(
                    n,
                    _(
                        "expected the second line of NPU %(npu_id)s (line %(pending)s) (Chip | Bus-Id | AICore ...), got another NPU line"
                    )
                    % {"npu_id": pending[1]["npu_id"], "pending": pending[0]},
                    kind=KIND,
                    text=line,
                )
            device = _chip_line(cells, n, line, pending[1], style, has_hbm)
            if device.index in devices:
                fail_line(
                    n,
                    _("device index %(index)s already used on line %(line)s")
                    % {"index": device.index, "line": index_line[device.index]},
                    kind=KIND,
                    text=line,
                )
            devices[device.index] = device
            index_line[device.index] = n
            by_npu_chip[(device.extra["npu_id"], device.extra["chip_id"])] = device
            pending = None
        n += 1
    if pending is not None:
        fail_line(
            pending[0] + 1,
            _("NPU %(npu_id)s has no second line (Chip | Bus-Id | AICore ...); truncated output?")
            % {"npu_id": pending[1]["npu_id"]},
            kind=KIND,
        )

    _npu_processes(lines, n, by_npu_chip, report)
    report.devices = [devices[i] for i in sorted(devices)]
    return report


def _npu_banner(lines: list[str], report: ParsedReport) -> int:
    """The line number of the ``npu-smi <version>  Version: <driver>`` banner (its versions noted)."""
    for n, line in enumerate(lines, start=1):
        match = _BANNER.search(line)
        if match:
            report.node["smi_version"] = match.group("smi")
            report.node["driver_version"] = match.group("driver")
            return n
    first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
    fail_line(first, _("no 'npu-smi <version>  Version: <version>' banner; is this npu-smi info?"), kind=KIND)
    raise AssertionError  # pragma: no cover - fail_line raises


def _npu_header(lines: list[str], banner_no: int) -> tuple[int, str, bool]:
    """The two header lines after the banner: (the second's line number, how the chip column names
    the card: chip / phy / device, whether an HBM-Usage column is there)."""
    head1 = head2 = None
    for n in range(banner_no + 1, len(lines) + 1):
        cells = _cells(lines[n - 1])
        if cells and cells[0].split()[:2] == ["NPU", "Name"]:
            head1 = n
            if n < len(lines):
                head2 = n + 1
            break
    if head1 is None:
        fail_line(len(lines), _("no 'NPU Name | Health | ...' header line after the banner"), kind=KIND)
    second = _cells(lines[head2 - 1]) if head2 else []
    if not second or not second[0].startswith("Chip"):
        fail_line(head2 or head1, _("expected the 'Chip | Bus-Id | AICore(%) ...' header line"), kind=KIND)
    chip_words = second[0].split()
    style = "chip"
    if len(chip_words) > 1:
        style = "phy" if chip_words[1].lower().startswith("phy") else "device"
    has_hbm = any("HBM-Usage" in cell for cell in second)
    return head2, style, has_hbm


def _npu_processes(
    lines: list[str], n: int, by_npu_chip: dict[tuple[int, int], ParsedDevice], report: ParsedReport
) -> None:
    """The process table from line ``n`` on: each process is noted on its card's ``extra``."""
    # The process table (optional: older 910 drivers print it, some builds omit it).
    while n <= len(lines):
        line = lines[n - 1]
        stripped = line.strip()
        n += 1
        if not stripped.startswith("|"):
            continue
        cells = _cells(line)
        if not cells or cells[0].split()[:2] == ["NPU", "Chip"] or _NO_PROCESS.search(stripped):
            continue
        process = _process_line(cells)
        if process is None:
            report.warnings.append(f"line {n - 1}: unreadable process row skipped")
            continue
        key, entry = process
        device = by_npu_chip.get(key)
        if device is None:
            report.warnings.append(
                f"line {n - 1}: process on NPU {key[0]} chip {key[1]}, which is not listed"
            )
            continue
        device.extra.setdefault("processes", []).append(entry)


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped.startswith("|"):
        return []
    return [cell.strip() for cell in stripped.strip("|").split("|")]


def _spaced(cell: str) -> list[str]:
    """Tokens of a cell with '/' always a token of its own ("0/0" and "0 / 0" read alike)."""
    return cell.replace("/", " / ").split()


def _value(raw: str, lineno: int, line: str, what: str) -> float | None:
    if raw == "-":
        return None
    try:
        return parse_number(raw)
    except ValueError:
        fail_line(
            lineno, _("%(what)s: %(raw)r is not a number") % {"what": what, "raw": raw}, kind=KIND, text=line
        )


def _count(raw: str, lineno: int, line: str, what: str) -> int | None:
    value = _value(raw, lineno, line, what)
    if value is not None and value != int(value):
        fail_line(
            lineno,
            _("%(what)s: %(raw)r is not a whole number") % {"what": what, "raw": raw},
            kind=KIND,
            text=line,
        )
    return None if value is None else int(value)


def _pair(tokens: list[str], at: int, lineno: int, line: str, what: str) -> tuple[int | None, int | None]:
    """``used / total`` starting at tokens[at]."""
    if len(tokens) < at + 3 or tokens[at + 1] != "/":
        fail_line(lineno, _("%(what)s: expected '<used> / <total>'") % {"what": what}, kind=KIND, text=line)
    return _count(tokens[at], lineno, line, what), _count(tokens[at + 2], lineno, line, what)


def _npu_line(cells: list[str], lineno: int, line: str) -> dict[str, Any]:
    words = cells[0].split()
    if len(words) < 2 or not _INT.fullmatch(words[0]):
        fail_line(
            lineno,
            _("expected '<NPU id> <name>' in the first cell, got %(cells)r") % {"cells": cells[0]},
            kind=KIND,
            text=line,
        )
    health = cells[1]
    if not health:
        fail_line(lineno, _("the Health cell is empty"), kind=KIND, text=line)
    tokens = _spaced(cells[2])
    if len(tokens) != 5:
        fail_line(
            lineno,
            _("expected 'Power(W) Temp(C) <used> / <total>' in the third cell, got %(cells)r")
            % {"cells": cells[2]},
            kind=KIND,
            text=line,
        )
    hugepages = _pair(tokens, 2, lineno, line, "Hugepages-Usage")
    return {
        "npu_id": int(words[0]),
        "name": " ".join(words[1:]),
        "health": health,
        "power": _value(tokens[0], lineno, line, "Power(W)"),
        "temperature": _value(tokens[1], lineno, line, "Temp(C)"),
        "hugepages": hugepages,
    }


def _chip_line(
    cells: list[str], lineno: int, line: str, npu: dict[str, Any], style: str, has_hbm: bool
) -> ParsedDevice:
    ids = cells[0].split()
    expected_ids = 1 if style == "chip" else 2
    if len(ids) != expected_ids or not all(_INT.fullmatch(i) for i in ids):
        label = {"chip": "<chip>", "phy": "<chip> <phy-id>", "device": "<chip> <device>"}[style]
        fail_line(
            lineno,
            _("expected '%(label)s' in the first cell, got %(cells)r") % {"label": label, "cells": cells[0]},
            kind=KIND,
            text=line,
        )
    chip_id = int(ids[0])
    index = npu["npu_id"] if style == "chip" else int(ids[1])

    try:
        pci_bus_id = normalise_pci_bus_id(cells[1])
    except ValueError:
        fail_line(
            lineno, _("Bus-Id %(cells)r is not a PCI bus id") % {"cells": cells[1]}, kind=KIND, text=line
        )

    tokens = _spaced(cells[2])
    pairs = 2 if has_hbm else 1
    # AICore(%) then one (Memory-Usage) or two (Memory-Usage, HBM-Usage) "used / total" pairs;
    # some builds leave the AICore column out.
    if len(tokens) == 1 + 3 * pairs:
        aicore: float | None = _value(tokens[0], lineno, line, "AICore(%)")
        start = 1
    elif len(tokens) == 3 * pairs:
        aicore, start = None, 0
    else:
        shape = "AICore(%) <used> / <total>" + (" <used> / <total>" if has_hbm else "")
        fail_line(
            lineno,
            _("expected '%(shape)s' in the third cell, got %(cells)r") % {"shape": shape, "cells": cells[2]},
            kind=KIND,
            text=line,
        )
    memory_used, memory_total = _pair(tokens, start, lineno, line, "Memory-Usage(MB)")
    hbm_used = hbm_total = None
    if has_hbm:
        hbm_used, hbm_total = _pair(tokens, start + 3, lineno, line, "HBM-Usage(MB)")

    health = npu["health"]
    healthy = health.upper() == "OK"
    extra: dict[str, Any] = {
        "npu_id": npu["npu_id"],
        "chip_id": chip_id,
        "hugepages_used": npu["hugepages"][0],
        "hugepages_total": npu["hugepages"][1],
        "ddr_memory_used_mib": memory_used,
        "ddr_memory_total_mib": memory_total,
    }
    if style == "phy":
        extra["phy_id"] = index
    elif style == "device":
        extra["device_id"] = index
    return ParsedDevice(
        index=index,
        model_name=npu["name"],
        memory_mib=hbm_total if has_hbm else memory_total,
        pci_bus_id=pci_bus_id,
        health="healthy" if healthy else "degraded",
        health_detail=None if healthy else health,
        utilization_pct=aicore,
        memory_used_mib=hbm_used if has_hbm else memory_used,
        temperature_c=npu["temperature"],
        power_w=npu["power"],
        extra=extra,
    )


def _process_line(cells: list[str]) -> tuple[tuple[int, int], dict[str, Any]] | None:
    ids = cells[0].split()
    if len(cells) < 4 or len(ids) != 2 or not all(_INT.fullmatch(i) for i in ids):
        return None
    pid = cells[1].split()[0] if cells[1].split() else ""
    if not _INT.fullmatch(pid):
        return None
    memory = re.match(r"\d+", cells[-1])
    entry = {
        "pid": int(pid),
        "name": na(cells[2]),
        "memory_mib": int(memory.group(0)) if memory else None,
    }
    return (int(ids[0]), int(ids[1])), entry


# ===================================================================================================
# npu-smi info -t topo
# ===================================================================================================
#
# Layout (Huawei "npu-smi info -t topo" in the Ascend npu-smi command reference, EDOC1100079287):
#
#            NPU0       NPU1       ...       CPU Affinity
#   NPU0     X          HCCS       ...       144-167
#   ...
#   Legend:
#     X    = Self
#     SYS  = Path traversing PCIe and NUMA nodes. ...   PHB, PIX, PXB, HCCS, SIO, HCCS_SW, NA
#
# A3 / Ascend910_93 servers label rows and columns ``Phy-ID<n>`` (the chip's physical id, which the
# ``npu-smi info`` parser also uses as the device index); Atlas 800 A2 label them ``NPU<n>``.
# Every off-diagonal pair becomes a link with the raw cell, except ``NA`` (unknown relationship).
# The tool prints a CPU affinity but no NUMA node, so ``numa_node`` stays None.

_TOPO_LABEL = re.compile(r"(?:NPU|Phy-ID)(\d+)", re.IGNORECASE)
_TOPO_CELLS = frozenset({"X", "HCCS", "HCCS_SW", "SIO", "PIX", "PXB", "PHB", "SYS", "NA"})


def parse_npu_smi_topo(text: str) -> ParsedReport:
    kind = KIND_TOPO
    lines = text_lines(text, kind=kind)
    header_no, header, trailing = _npu_topo_header(lines)

    rows: dict[str, list[str]] = {}
    affinity: dict[str, str | None] = {}
    row_line: dict[str, int] = {}
    end = len(lines) + 1
    for n in range(header_no + 1, len(lines) + 1):
        line = lines[n - 1]
        tokens = line.split()
        if not tokens or tokens[0].startswith("Legend"):
            end = n
            break
        label, cells = tokens[0], tokens[1:]
        if label not in header:
            fail_line(
                n,
                _("row label %(label)r is not a column of the header (line %(header_no)s)")
                % {"label": label, "header_no": header_no},
                kind=kind,
                text=line,
            )
        if label in rows:
            fail_line(
                n,
                _("row %(label)s appears twice (first on line %(line)s)")
                % {"label": label, "line": row_line[label]},
                kind=kind,
                text=line,
            )
        if len(cells) not in (len(header), len(header) + trailing):
            fail_line(
                n,
                (
                    _("expected %(count)s cells (%(first)s..%(last)s) and a CPU affinity, got %(got)s")
                    if trailing
                    else _("expected %(count)s cells (%(first)s..%(last)s), got %(got)s")
                )
                % {"count": len(header), "first": header[0], "last": header[-1], "got": len(cells)},
                kind=kind,
                text=line,
            )
        _npu_topo_row_cells(header, cells, label, n, line)
        rows[label] = cells[: len(header)]
        affinity[label] = na(cells[len(header)]) if len(cells) > len(header) else None
        row_line[label] = n
    missing = [label for label in header if label not in rows]
    if missing:
        fail_line(
            min(end, len(lines)),
            _("matrix ends before the row for %(missing)s (truncated output?)") % {"missing": missing[0]},
            kind=kind,
        )
    if end > len(lines):
        fail_line(len(lines), _("no 'Legend:' block after the matrix: the output is truncated"), kind=kind)

    index = {label: int(_TOPO_LABEL.fullmatch(label).group(1)) for label in header}
    if len(set(index.values())) != len(index):
        fail_line(
            header_no, _("two labels name the same device number"), kind=kind, text=lines[header_no - 1]
        )
    position = {label: k for k, label in enumerate(header)}
    cells_by_pair = {(a, b): rows[a][position[b]].upper() for a in header for b in header}
    switches = pix_switch_ids(header, cells_by_pair)
    report = ParsedReport(vendor=VENDOR, kind=kind, full_inventory=False)
    for label in header:
        report.devices.append(ParsedDevice(index=index[label], pcie_switch=switches[label]))
    for a in header:
        for b in header:
            if index[a] >= index[b]:
                continue
            cell, back = cells_by_pair[(a, b)], cells_by_pair[(b, a)]
            if cell != back:
                report.warnings.append(f"{a}-{b} is {cell} one way and {back} the other")
            if cell == "NA":
                continue
            report.links.append(ParsedLink(a=index[a], b=index[b], link=cell))
    report.devices.sort(key=lambda d: d.index)
    report.links.sort(key=lambda link: (link.a, link.b))
    report.topology = {
        "labels": header,
        "cpu_affinity": {index[label]: affinity[label] for label in header},
    }
    return report


def _npu_topo_header(lines: list[str]) -> tuple[int, list[str], int]:
    """The matrix header: (its line number, its NPU<n> / Phy-ID<n> labels, 1 when a CPU Affinity
    column follows them, else 0)."""
    kind = KIND_TOPO
    header_no = None
    for n, line in enumerate(lines, start=1):
        tokens = line.split()
        if tokens and _TOPO_LABEL.fullmatch(tokens[0]) and line[:1].isspace():
            header_no = n
            break
        if tokens:
            fail_line(
                n,
                _(
                    "expected the matrix header '   NPU0  NPU1 ... CPU Affinity'; is this npu-smi info -t topo output?"
                ),
                kind=kind,
                text=line,
            )
    if header_no is None:
        fail_line(len(lines), _("no matrix header found"), kind=kind)
    header = lines[header_no - 1].split()
    trailing = 0
    if header[-2:] == ["CPU", "Affinity"]:
        header, trailing = header[:-2], 1
    if not all(_TOPO_LABEL.fullmatch(label) for label in header):
        fail_line(
            header_no,
            _("header cells must be NPU<n> or Phy-ID<n> labels"),
            kind=kind,
            text=lines[header_no - 1],
        )
    if len(set(header)) != len(header):
        fail_line(header_no, _("the header repeats a column"), kind=kind, text=lines[header_no - 1])
    return header_no, header, trailing


def _npu_topo_row_cells(header: list[str], cells: list[str], label: str, n: int, line: str) -> None:
    """Every matrix cell of a row is a topology cell, with X on the diagonal and nowhere else."""
    kind = KIND_TOPO
    for column, cell in zip(header, cells, strict=False):
        if cell.upper() not in _TOPO_CELLS:
            fail_line(
                n,
                _("row %(label)s, column %(column)s: %(cell)r is not a topology cell")
                % {"label": label, "column": column, "cell": cell},
                kind=kind,
                text=line,
            )
        diagonal_check(
            is_x=cell.upper() == "X", label=label, column=column, cell=cell, lineno=n, kind=kind, text=line
        )


# ===================================================================================================
# Adapter
# ===================================================================================================


class HuaweiAdapter(VendorAdapter):
    vendor = "huawei"
    display_name = "Huawei Ascend"
    device_kind = "npu"
    # Whole-device resource of the 910 family; 310P nodes advertise huawei.com/Ascend310P and
    # newer MindCluster releases the generic huawei.com/npu (hardware-telemetry.md §4).
    resource_name = "huawei.com/Ascend910"
    visible_devices_env = "ASCEND_VISIBLE_DEVICES"
    accelerator_label = "huawei-npu"
    brand_label = "huawei"
    model_label_key = "npu-model"
    model_label_lowercase = True  # seed 004 labels Ascend nodes npu-model=910b
    driver_mounts = (
        {
            "name": "ascend-driver",
            "hostPath": "/usr/local/Ascend/driver",
            "mountPath": "/usr/local/Ascend/driver",
            "readOnly": True,
        },
    )
    parsers = {KIND: parse_npu_smi, KIND_TOPO: parse_npu_smi_topo}
