"""Spreadsheet-safe cells, shared by every export (CSV and XLSX).

Spreadsheet programs (Excel, LibreOffice Calc, Google Sheets) read a cell whose text begins with
``=``, ``+``, ``-``, ``@``, a tab (0x09) or a carriage return (0x0D) as a formula, so a project named
``=HYPERLINK(…)`` would become a live link in whoever opens the export. Following OWASP "CSV
Injection" (https://owasp.org/www-community/attacks/CSV_Injection), such a cell is prefixed with a
single quote, which makes it text. Real numbers stay numbers: ``-12.50`` is an amount, not a formula.

The escape is reversible: a text that already begins with a quote followed by a trigger (or by another
quote) gets one more quote, so ``formula_unescape`` gives back exactly what was exported (the ledger
import reads its own exports this way).

XLSX has typed cells, so there the text is kept as it is, stored as a string (openpyxl would
otherwise store ``=…`` as a formula) and flagged with ``quotePrefix`` — the flag Excel sets itself
when someone types ``'=…`` (ECMA-376 Part 1, §18.8.45 ``xf@quotePrefix``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from apps.core.formatting import ISO_DATETIME, as_local, iso_local

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z")


def is_plain_number(text: str) -> bool:
    """A decimal number as a spreadsheet reads it (``-3``, ``+1.5``, ``2e-3``); not ``-inf``, ``1_0``."""
    return bool(_NUMBER.match(text))


def formula_escape(text: str) -> str:
    """``text`` with a leading ``'`` when a spreadsheet would read it as a formula (see module doc)."""
    if not text:
        return text
    if text.startswith(FORMULA_TRIGGERS) and not is_plain_number(text):
        return "'" + text
    if text[0] == "'" and text[1:2] in (*FORMULA_TRIGGERS, "'"):
        return "'" + text
    return text


def formula_unescape(text: str) -> str:
    """The inverse of ``formula_escape``."""
    if len(text) > 1 and text[0] == "'" and text[1] in (*FORMULA_TRIGGERS, "'"):
        return text[1:]
    return text


def csv_cell(value: Any) -> str:
    """One CSV cell: empty for None, numbers as they are, every text escaped."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, datetime) or (isinstance(value, str) and ISO_DATETIME.match(value)):
        # Times in the platform zone with its offset: "2026-12-01 16:38:00+08:00" (apps/core/formatting.py).
        return str(iso_local(value))
    if isinstance(value, (int, float, Decimal, date)):
        return str(value)  # numbers stay numbers; a date's text never starts like a formula
    return formula_escape(str(value))


def csv_row(values: Iterable[Any]) -> list[str]:
    return [csv_cell(value) for value in values]


def xlsx_value(value: Any) -> Any:
    """A value for an openpyxl cell: numbers stay numbers; text loses the control characters XML
    cannot carry (openpyxl refuses them)."""
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    if isinstance(value, datetime) and value.tzinfo is not None:
        # Excel has no time zones: the wall-clock time in the platform zone.
        return as_local(value).replace(tzinfo=None)
    if value is None or isinstance(value, (bool, int, float, Decimal, datetime, date)):
        return value
    return ILLEGAL_CHARACTERS_RE.sub("", str(value))


def xlsx_neutralize(cells: Iterable[Any]) -> None:
    """Make every text cell of ``cells`` (openpyxl cells) inert: a string, never a formula, and marked
    with quotePrefix when it starts like one."""
    for cell in cells:
        value = cell.value
        if not isinstance(value, str):
            continue
        if cell.data_type == "f":
            cell.data_type = "s"
        if value.startswith(FORMULA_TRIGGERS) and not is_plain_number(value):
            cell.quotePrefix = True


def xlsx_append(sheet, values: Iterable[Any]) -> tuple:
    """Append one row of values to an openpyxl sheet, neutralized; returns the row's cells."""
    row_values = [xlsx_value(value) for value in values]
    sheet.append(row_values)
    if not row_values:
        return ()
    row = sheet[sheet.max_row]
    xlsx_neutralize(row)
    return row
