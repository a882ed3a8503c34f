"""Reading the boxed card tables that nvidia-smi-style tools print (mx-smi, ixsmi, xpu-smi, efsmi).

Such a table is a header of ``| ... | ... | ... |`` lines closed by a rule, then one block of
``| ... |`` lines per card, each block closed by a rule (``+---+---+``, ``|===|``, ``|---|``); a blank
line (or the end of the text) ends the table. ``read_card_table`` returns the header cells and the
cards' lines; each vendor module gives the cells their meaning. Pure Python, no Django models.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from .adapter import fail_line, na, normalise_pci_bus_id, parse_int, parse_number

_RULE = re.compile(r"[+|][-=+|]*[-=][-=+|]*[+|]")


def is_rule(stripped: str) -> bool:
    """A box rule: only ``+ | - =`` characters, at least one ``-`` or ``=``."""
    return _RULE.fullmatch(stripped) is not None


def box_cells(line: str) -> list[str]:
    """The stripped cells of a ``| a | b | c |`` line."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@dataclass
class CardRow:
    lineno: int
    line: str
    cells: list[str]


@dataclass
class CardTable:
    header_line: int
    header: list[list[str]]  # the header lines' cells, top to bottom
    cards: list[list[CardRow]] = field(default_factory=list)
    end_line: int = 0  # the last line of the table (its closing rule)


def read_card_table(
    lines: list[str], *, kind: str, header: re.Pattern[str], header_text: str, tool: str
) -> CardTable:
    """The card table whose first header line matches ``header`` (``ParseFailed`` naming the line).

    ``header_text`` is how the header is quoted in messages ("| GPU  NAME | Bus-id | ..."), ``tool``
    the tool's name ("mx-smi"). The table must list at least one card, and every card block must
    be closed by a rule: an output that stops inside a block is truncated.
    """
    start = next((n for n, line in enumerate(lines, start=1) if header.match(line.strip())), None)
    if start is None:
        first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
        fail_line(
            first,
            _("no '%(header)s' header; is this %(tool)s output?") % {"header": header_text, "tool": tool},
            kind=kind,
            text=lines[first - 1],
        )
    table = CardTable(header_line=start, header=[])
    n = start
    while n <= len(lines) and not is_rule(lines[n - 1].strip()):
        if not lines[n - 1].strip().startswith("|"):
            fail_line(n, _("expected a '| ... |' header line"), kind=kind, text=lines[n - 1])
        table.header.append(box_cells(lines[n - 1]))
        n += 1
    if n > len(lines):
        fail_line(len(lines), _("the output ends inside the table header: truncated"), kind=kind)
    block: list[CardRow] = []
    rule = n  # the rule that closes the header
    for n in range(rule + 1, len(lines) + 1):
        stripped = lines[n - 1].strip()
        if not stripped:
            break
        if is_rule(stripped):
            if block:
                table.cards.append(block)
                block = []
            table.end_line = n
            continue
        if not stripped.startswith("|"):
            fail_line(n, _("expected a '| ... |' card line"), kind=kind, text=lines[n - 1])
        block.append(CardRow(n, lines[n - 1], box_cells(lines[n - 1])))
    if block:
        fail_line(
            block[-1].lineno,
            _("the card block starting on line %(line)d is not closed by a rule: the output is truncated")
            % {"line": block[0].lineno},
            kind=kind,
        )
    if not table.cards:
        fail_line(start, _("the table lists no card"), kind=kind, text=lines[start - 1])
    return table


def check_card_rows(block: list[CardRow], *, rows: int, cells: int, kind: str) -> None:
    """Every card block has ``rows`` lines of ``cells`` cells each."""
    if len(block) != rows:
        fail_line(
            block[0].lineno,
            _("expected %(rows)d lines per card, got %(count)d") % {"rows": rows, "count": len(block)},
            kind=kind,
            text=block[0].line,
        )
    for row in block:
        if len(row.cells) != cells:
            fail_line(
                row.lineno,
                _("expected %(cells)d '|'-separated cells, got %(count)d")
                % {"cells": cells, "count": len(row.cells)},
                kind=kind,
                text=row.line,
            )


def section_after(lines: list[str], after: int, marker: re.Pattern[str]) -> int | None:
    """The 1-based number of the first line after line ``after`` that matches ``marker``, or None."""
    return next((n for n in range(after + 1, len(lines) + 1) if marker.search(lines[n - 1])), None)


# ---------------------------------------------------------------------------------------------------
# Cells of the nvidia-smi layout (ixsmi, xpu-smi): "N/A  35C  P0  103W / 350W", "64MiB / 32768MiB"
# ---------------------------------------------------------------------------------------------------

_FAN_TEMP_PERF_POWER = re.compile(
    r"(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<usage>\S+?)\s*/\s*(?P<cap>\S+)"
)
_USED_TOTAL_MIB = re.compile(r"(?P<used>\S+?)\s*MiB\s*/\s*(?P<total>\S+?)\s*MiB")


def fan_temp_perf_power(row: CardRow, *, kind: str) -> dict[str, float | str | None]:
    """``<fan> <temp>C <perf> <usage>W / <cap>W`` (each may be N/A) from the row's first cell."""
    match = _FAN_TEMP_PERF_POWER.fullmatch(row.cells[0])
    try:
        if match is None:
            raise ValueError(row.cells[0])
        return {
            "fan_pct": parse_number(match["fan"], "%"),
            "temperature_c": parse_number(match["temp"], "C"),
            "perf": na(match["perf"]),
            "power_w": parse_number(match["usage"], "W"),
            "power_cap_w": parse_number(match["cap"], "W"),
        }
    except ValueError:
        fail_line(
            row.lineno,
            _("expected '<fan> <temp>C <perf> <usage>W / <cap>W' in the first cell, got %(cell)r")
            % {"cell": row.cells[0]},
            kind=kind,
            text=row.line,
        )


def used_total_mib(row: CardRow, cell: int, *, kind: str) -> tuple[int | None, int | None]:
    """``<used>MiB / <total>MiB`` from one cell of the row."""
    match = _USED_TOTAL_MIB.fullmatch(row.cells[cell])
    try:
        if match is None:
            raise ValueError(row.cells[cell])
        return parse_int(match["used"]), parse_int(match["total"])
    except ValueError:
        fail_line(
            row.lineno,
            _("expected '<used>MiB / <total>MiB', got %(cell)r") % {"cell": row.cells[cell]},
            kind=kind,
            text=row.line,
        )


def pci_bus_id_cell(row: CardRow, raw: str, *, kind: str) -> str | None:
    try:
        return normalise_pci_bus_id(raw)
    except ValueError:
        fail_line(row.lineno, _("%(raw)r is not a PCI bus id") % {"raw": raw}, kind=kind, text=row.line)


def card_index_and_name(row: CardRow, *, kind: str, drop_last: bool = False) -> tuple[int, str]:
    """``<index> <name ...>`` from the row's first cell; ``drop_last`` drops a trailing column value."""
    words = row.cells[0].split()
    if drop_last:
        words = words[:-1]
    if len(words) < 2 or not words[0].isdigit():
        fail_line(
            row.lineno,
            _("expected '<index> <name>' in the first cell, got %(cell)r") % {"cell": row.cells[0]},
            kind=kind,
            text=row.line,
        )
    return int(words[0]), " ".join(words[1:])


def check_unique_indexes(devices: list, blocks: list[list[CardRow]], *, kind: str) -> None:
    seen: dict[int, int] = {}
    for device, block in zip(devices, blocks, strict=True):
        if device.index in seen:
            fail_line(
                block[0].lineno,
                _("card %(index)s already listed on line %(line)s")
                % {"index": device.index, "line": seen[device.index]},
                kind=kind,
                text=block[0].line,
            )
        seen[device.index] = block[0].lineno


def card_devices(
    lines: list[str],
    *,
    kind: str,
    header: re.Pattern[str],
    header_text: str,
    tool: str,
    rows: int,
    card: Callable[[list[CardRow]], Any],
) -> tuple[list[Any], CardTable]:
    """The devices of the card table (``read_card_table``): every block checked to ``rows`` rows of
    three cells and read by ``card``, no index listed twice; sorted by index. Also the table."""
    table = read_card_table(lines, kind=kind, header=header, header_text=header_text, tool=tool)
    devices = []
    for block in table.cards:
        check_card_rows(block, rows=rows, cells=3, kind=kind)
        devices.append(card(block))
    check_unique_indexes(devices, table.cards, kind=kind)
    return sorted(devices, key=lambda d: d.index), table


_PROCESSES = re.compile(r"^\|\s*Processes:")


def require_processes_box(lines: list[str], table: CardTable, *, kind: str) -> None:
    """The nvidia-smi layout (ixsmi, xpu-smi) prints a ``| Processes:`` box after the card table:
    without it the output is truncated (``ParseFailed`` on the table's last line)."""
    if section_after(lines, table.end_line, _PROCESSES) is None:
        fail_line(
            table.end_line,
            _("no '| Processes:' box after the card table: the output is truncated"),
            kind=kind,
        )
