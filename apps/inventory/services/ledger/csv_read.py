"""Reading a ledger CSV (the file format is described in ``apps.inventory.services.ledger.csv_import``):
decoding, cells, the import's report and plans."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import models

from apps.catalog.models import Vendor
from apps.core.errors import ValidationFailed
from apps.core.exports import formula_escape
from apps.inventory.models import Cluster, Device, Node
from apps.inventory.services.ledger.common import (
    _FORMULA_PREFIXES,
    EXPORT_COLUMNS,
    IMPORT_COLUMNS,
    MAX_IMPORT_ROWS,
)

# --------------------------------------------------------------------------------------------------
# CSV import


@dataclass
class ImportReport:
    """What an import did (or, with ``dry_run``, would do).

    ``unchanged`` counts existing nodes and devices named in the file that needed no change.
    ``warnings`` and ``rows`` hold ``{"line": n, ...}`` dicts (line 1 is the header); ``rows`` has one
    entry per data line with ``node_action`` (on the node's first line) and ``device_action``, each
    one of created / updated / unchanged / skipped, or "" when the line does not concern it, and
    the names of the fields it changed in ``node_changes`` / ``device_changes``.
    """

    created_nodes: int = 0
    updated_nodes: int = 0
    created_devices: int = 0
    updated_devices: int = 0
    unchanged: int = 0
    warnings: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.created_nodes or self.updated_nodes or self.created_devices or self.updated_devices)

    def as_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["changed"] = self.changed
        return body


@dataclass
class _Row:
    line: int
    cells: dict[str, str]


@dataclass
class _NodePlan:
    cluster: Cluster
    name: str
    line: int
    node: Node | None
    values: dict[str, Any] = field(default_factory=dict)
    value_lines: dict[str, int] = field(default_factory=dict)
    status: str | None = None
    status_line: int = 0
    failed: bool = False
    action: str = "unchanged"


@dataclass
class _DevicePlan:
    line: int
    node_plan: _NodePlan
    vendor: str
    index: int
    values: dict[str, Any]
    device: Device | None = None
    # Rows of retired cards are never written: "unchanged" when they match the ledger, else "skipped".
    frozen: str = ""

    def target(self) -> dict[str, Any]:
        return {"index": self.index, **self.values}


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        return data.removeprefix("\ufeff")
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ValidationFailed(  # pragma: no cover - gb18030 decodes nearly anything
        "the file is neither UTF-8 nor GB18030 text",
        details={"rows": [{"line": 1, "column": "", "message": "bad encoding"}]},
    )


def _unescape(value: str) -> str:
    if len(value) > 1 and value[0] == "'" and value[1] in _FORMULA_PREFIXES + ("'",):
        return value[1:]
    return value


def _escape(value: str) -> str:
    """Defuse spreadsheet formulas (CSV injection); ``_unescape`` reverses it on import. One rule for
    every export: apps.core.exports (OWASP "CSV Injection")."""
    return formula_escape(value)


def _read_csv(text: str) -> tuple[list[_Row], list[dict[str, Any]]]:
    """(data rows, errors). Errors here are about the file's shape."""
    errors: list[dict[str, Any]] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    header_line = 1
    rows: list[_Row] = []
    end = 0
    try:
        for record in reader:
            start, end = end + 1, reader.line_num
            if not any(cell.strip() for cell in record):
                continue
            if header is None:
                header, header_line = [cell.strip().lower() for cell in record], start
                continue
            if len(rows) >= MAX_IMPORT_ROWS:
                errors.append({"line": start, "column": "", "message": f"more than {MAX_IMPORT_ROWS} rows"})
                break
            cells: dict[str, str] = {}
            for position, raw in enumerate(record):
                value = raw.strip()
                name = header[position] if position < len(header) else ""
                if not name:
                    if value:
                        errors.append(
                            {
                                "line": start,
                                "column": f"#{position + 1}",
                                "message": "a value in a column without a header",
                            }
                        )
                    continue
                cells[name] = _unescape(value)
            rows.append(_Row(line=start, cells=cells))
    except csv.Error as exc:
        errors.append({"line": end + 1, "column": "", "message": f"not valid CSV: {exc}"})
    if header is None:
        errors.append({"line": 1, "column": "", "message": "the file is empty: expected a header row"})
        return rows, errors
    seen: set[str] = set()
    for name in header:
        if not name:
            continue
        if name not in EXPORT_COLUMNS:
            errors.append(
                {
                    "line": header_line,
                    "column": name,
                    "message": f"unknown column {name!r}; columns: {', '.join(IMPORT_COLUMNS)}",
                }
            )
        elif name in seen:
            errors.append({"line": header_line, "column": name, "message": f"column {name!r} appears twice"})
        seen.add(name)
    for required in ("cluster", "node"):
        if required not in seen:
            errors.append(
                {
                    "line": header_line,
                    "column": required,
                    "message": f"the required column {required!r} is missing",
                }
            )
    return rows, errors


def _norm(name: str) -> str:
    return " ".join(name.casefold().split())


_VENDORS: dict[str, str] = {v.value: v.value for v in Vendor} | {_norm(str(v.label)): v.value for v in Vendor}


def _max_length(model: type[models.Model], name: str) -> int:
    return model._meta.get_field(name).max_length
