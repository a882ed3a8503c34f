"""NVIDIA ``nvidia-smi topo -m``: a tab-separated matrix, header row starting with a tab, trailing
``CPU Affinity``, ``NUMA Affinity`` and (newer drivers) ``GPU NUMA ID``, which data rows precede with
an empty cell (hardware-telemetry.md §2)."""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from .adapter import (
    diagonal_check,
    fail_line,
    na,
    pix_switch_ids,
    single_int,
    text_lines,
)
from .base import ParsedDevice, ParsedLink, ParsedReport

KIND_TOPO = "nvidia-topo"
VENDOR = "nvidia"

_TRAILING_HEADERS = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))
_KNOWN_LINKS = re.compile(r"X|SYS|NODE|PHB|PXB|PIX|SOC|PSB|NV\d+")
_ANY_LINK = re.compile(r"[A-Z][A-Z0-9#]*")
_GPU_LABEL = re.compile(r"GPU(\d+)")
_NIC_LEGEND_ENTRY = re.compile(r"\s*(\S+):\s*(\S+)\s*")


def parse_nvidia_topo(text: str) -> ParsedReport:
    kind = KIND_TOPO
    lines = text_lines(text, kind=kind)
    header_at = _topo_header_at(lines)
    columns, trailing = _topo_header(lines[header_at], header_at + 1)
    matrix, tails, end = _topo_rows(lines, header_at, columns, trailing)
    legend = _topo_nic_legend(lines, end)
    report = ParsedReport(vendor=VENDOR, kind=kind, full_inventory=False)
    gpu_labels = [c for c in columns if _GPU_LABEL.fullmatch(c)]
    nic_labels = [c for c in columns if not _GPU_LABEL.fullmatch(c)]
    aliased = [c for c in nic_labels if re.fullmatch(r"NIC\d+", c)]
    if aliased and legend is None:
        fail_line(
            end + 1, _("the matrix has NIC columns but no 'NIC Legend:' block (truncated output?)"), kind=kind
        )
    for label in aliased:
        if label not in (legend or {}):
            fail_line(
                len(lines),
                _("'NIC Legend:' has no entry for %(label)s (truncated output?)") % {"label": label},
                kind=kind,
            )

    position = {c: k for k, c in enumerate(columns)}
    gpu_index = {label: int(_GPU_LABEL.fullmatch(label).group(1)) for label in gpu_labels}
    unknown: set[str] = set()
    for row in columns:
        for cell in matrix[row]:
            if not _KNOWN_LINKS.fullmatch(cell):
                unknown.add(cell)
    if unknown:
        report.warnings.append(f"unknown topology cells: {', '.join(sorted(unknown))}")

    switches = pix_switch_ids(
        gpu_labels, {(row, col): matrix[row][position[col]] for row in columns for col in columns}
    )
    gpus_topology: dict[int, dict[str, Any]] = {}
    for label in gpu_labels:
        affinity = dict(zip(trailing, tails[label], strict=True))
        numa_affinity = na(affinity.get("NUMA Affinity"))
        gpus_topology[gpu_index[label]] = {
            "cpu_affinity": na(affinity.get("CPU Affinity")),
            "numa_affinity": numa_affinity,
            "gpu_numa_id": single_int(affinity.get("GPU NUMA ID")),
        }
        report.devices.append(
            ParsedDevice(
                index=gpu_index[label], numa_node=single_int(numa_affinity), pcie_switch=switches[label]
            )
        )

    for a_label in gpu_labels:
        for b_label in gpu_labels:
            a, b = gpu_index[a_label], gpu_index[b_label]
            if a >= b:
                continue
            cell = matrix[a_label][position[b_label]]
            back = matrix[b_label][position[a_label]]
            if back != cell:
                report.warnings.append(f"GPU{a}-GPU{b} is {cell} one way and {back} the other")
            report.links.append(ParsedLink(a=a, b=b, link=cell))

    nics: dict[str, dict[str, Any]] = {}
    for label in nic_labels:
        nics[label] = {
            "name": (legend or {}).get(label, label),
            "gpu_links": {gpu_index[g]: matrix[g][position[label]] for g in gpu_labels},
        }
    report.topology = {"columns": columns, "gpus": gpus_topology, "nics": nics}
    report.devices.sort(key=lambda d: d.index)
    report.links.sort(key=lambda link: (link.a, link.b))
    return report


def _topo_header_at(lines: list[str]) -> int:
    """The index of the matrix header line (a row starting with whitespace, then GPU0 ...)."""
    for i, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) >= 1 and tokens[0] == "GPU0" and (line[:1].isspace() or tokens[1:2] != ["X"]):
            return i
    first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
    fail_line(
        first, _("no matrix header found (a row starting with whitespace, then GPU0 ...)"), kind=KIND_TOPO
    )
    raise AssertionError  # pragma: no cover - fail_line raises


def _topo_rows(
    lines: list[str], header_at: int, columns: list[str], trailing: list[str]
) -> tuple[dict[str, list[str]], dict[str, list[str]], int]:
    """The matrix rows after the header: (cells by row label, trailing cells by row label, the index
    of the line that ended the matrix). A row missing from the matrix is an error."""
    kind = KIND_TOPO
    header_no = header_at + 1
    width = len(columns)
    matrix: dict[str, list[str]] = {}
    tails: dict[str, list[str]] = {}
    row_line: dict[str, int] = {}
    end = len(lines)
    for i in range(header_at + 1, len(lines)):
        line, lineno = lines[i], i + 1
        if not line.strip() or line.strip().startswith("Legend"):
            end = i
            break
        if "\t" in line:
            cells = [c.strip() for c in line.split("\t")]
            tab_mode = True
        else:
            cells = line.split()
            tab_mode = False
        label, rest = cells[0], cells[1:]
        if label not in columns:
            fail_line(
                lineno,
                _("row label %(label)r is not a column of the header (line %(header_no)s)")
                % {"label": label, "header_no": header_no},
                kind=kind,
                text=line,
            )
        if label in matrix:
            fail_line(
                lineno,
                _("row %(label)s appears twice (first on line %(line)s)")
                % {"label": label, "line": row_line[label]},
                kind=kind,
                text=line,
            )
        if len(rest) < width:
            fail_line(
                lineno,
                _("expected %(width)s matrix cells (%(columns)s..%(columns2)s), got %(count)s")
                % {"width": width, "columns": columns[0], "columns2": columns[-1], "count": len(rest)},
                kind=kind,
                text=line,
            )
        cells_m, tail = rest[:width], rest[width:]
        _topo_row_cells(cells_m, columns, trailing, label, lineno, line)
        tail = _topo_tail(tail, trailing, tab_mode, lineno, line, label, width)
        matrix[label], tails[label], row_line[label] = cells_m, tail, lineno

    missing = [c for c in columns if c not in matrix]
    if missing:
        fail_line(
            end + 1,
            _("matrix ends before the row for %(missing)s (truncated output?)") % {"missing": missing[0]},
            kind=kind,
        )
    return matrix, tails, end


def _topo_row_cells(
    cells: list[str], columns: list[str], trailing: list[str], label: str, lineno: int, line: str
) -> None:
    """Every matrix cell of a row is a topology cell, with X on the diagonal and nowhere else."""
    kind = KIND_TOPO
    width = len(columns)
    for column, cell in zip(columns, cells, strict=True):
        if not _ANY_LINK.fullmatch(cell):
            fail_line(
                lineno,
                _(
                    "row %(label)s, column %(column)s: %(cell)r is not a topology cell (expected %(count)s cells as in the header)"
                )
                % {"label": label, "column": column, "cell": cell, "count": 1 + width + len(trailing)},
                kind=kind,
                text=line,
            )
        diagonal_check(
            is_x=cell == "X", label=label, column=column, cell=cell, lineno=lineno, kind=kind, text=line
        )


def _topo_header(line: str, lineno: int) -> tuple[list[str], list[str]]:
    kind = KIND_TOPO
    tokens = line.split()
    columns: list[str] = []
    trailing: list[str] = []
    i = 0
    while i < len(tokens):
        for words in _TRAILING_HEADERS:
            if tuple(tokens[i : i + len(words)]) == words:
                trailing.append(" ".join(words))
                i += len(words)
                break
        else:
            if trailing:
                fail_line(
                    lineno,
                    _("unexpected header cell %(tokens)r after %(trailing)r")
                    % {"tokens": tokens[i], "trailing": trailing[-1]},
                    kind=kind,
                    text=line,
                )
            columns.append(tokens[i])
            i += 1
    if len(set(columns)) != len(columns):
        fail_line(lineno, _("the header repeats a column"), kind=kind, text=line)
    gpus = [c for c in columns if _GPU_LABEL.fullmatch(c)]
    if gpus != [f"GPU{k}" for k in range(len(gpus))] or columns[: len(gpus)] != gpus:
        fail_line(lineno, _("GPU columns must come first, numbered GPU0, GPU1, ..."), kind=kind, text=line)
    return columns, trailing


def _topo_tail(
    tail: list[str], trailing: list[str], tab_mode: bool, lineno: int, line: str, label: str, width: int
) -> list[str]:
    """The CPU Affinity / NUMA Affinity / GPU NUMA ID cells of a row, one per trailing header."""
    n = len(trailing)
    tail = list(tail)
    if tab_mode:
        # Newer drivers print an empty cell before GPU NUMA ID on data rows (not in the header).
        if "GPU NUMA ID" in trailing and len(tail) == n + 1 and tail[n - 1] == "":
            del tail[n - 1]
        while len(tail) > n and tail[-1] == "":
            tail.pop()
    if len(tail) > n:
        fail_line(
            lineno,
            _("row %(label)s has %(count)s cells after the label, the header has %(count2)s")
            % {"label": label, "count": width + len(tail), "count2": width + n},
            kind=KIND_TOPO,
            text=line,
        )
    padding = [""] * (n - len(tail))
    # Whitespace-separated copies lose empty cells; an empty CPU Affinity is the one that happens,
    # so missing cells are taken from the left.
    return tail + padding if tab_mode else padding + tail


def _topo_nic_legend(lines: list[str], start: int) -> dict[str, str] | None:
    legend: dict[str, str] | None = None
    for line in lines[start:]:
        if line.strip() == "NIC Legend:":
            legend = {}
            continue
        if legend is None:
            continue
        if not line.strip():
            if legend:
                break
            continue
        match = _NIC_LEGEND_ENTRY.fullmatch(line)
        if not match:
            break
        legend[match.group(1)] = match.group(2)
    return legend
