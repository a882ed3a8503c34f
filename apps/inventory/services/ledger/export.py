"""The ledger export: one row per device, as CSV or XLSX (the columns the import reads back)."""

from __future__ import annotations

import csv
import io
import unicodedata
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from apps.core.errors import ValidationFailed
from apps.core.exports import xlsx_append
from apps.inventory.models import Device
from apps.inventory.services.ledger.common import (
    _NODE_TEXT_COLUMNS,
    EXPORT_COLUMNS,
)
from apps.inventory.services.ledger.csv_read import (
    _escape,
)

# --------------------------------------------------------------------------------------------------
# export

CSV_CONTENT_TYPE = "text/csv; charset=utf-8"
XLSX_CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _export_row(device: Device) -> dict[str, Any]:
    node = device.node
    return {
        "cluster": node.cluster.slug,
        "pool": node.pool.slug if node.pool_id else "",
        "node": node.name,
        "node_status": node.status,
        **{name: getattr(node, name) for name in _NODE_TEXT_COLUMNS},
        "vendor": device.vendor,
        "device_index": device.index,
        "device_model": device.device_model.name if device.device_model_id else device.raw_model_name,
        "uuid": device.uuid or "",
        "serial": device.serial,
        "pci_bus_id": device.pci_bus_id,
        "numa_node": device.numa_node,
        "firmware_version": device.firmware_version,
        "owner_project": device.owner_project.slug if device.owner_project_id else "",
        "topology_group": device.topology_group,
        "health": device.health,
        "pool_status": device.pool_status,
        "model_unrecognized": device.model_unrecognized,
        "last_seen_at": timezone.localtime(device.last_seen_at).isoformat() if device.last_seen_at else "",
    }


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return _escape(str(value))


def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _xlsx_bytes(rows: list[dict[str, Any]]) -> bytes:
    from openpyxl import Workbook
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "ledger"
    sheet.append(list(EXPORT_COLUMNS))
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    widths = [_display_width(name) for name in EXPORT_COLUMNS]
    for row in rows:
        values = []
        for position, name in enumerate(EXPORT_COLUMNS):
            value = row[name]
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, str):
                value = ILLEGAL_CHARACTERS_RE.sub("", value)
            values.append(value)
            widths[position] = max(widths[position], _display_width("" if value is None else str(value)))
        # Text is text: never let a value that starts with "=" become a formula.
        xlsx_append(sheet, values)
    for position, width in enumerate(widths, start=1):
        sheet.column_dimensions[get_column_letter(position)].width = min(max(width, 6), 60) + 2
    sheet.freeze_panes = "A2"
    sheet.auto_filter.ref = sheet.dimensions
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def ledger_export(*, devices: QuerySet[Device], fmt: str) -> tuple[bytes, str, str]:
    """Export devices in the import's columns plus the read-only ones: (content, content type, filename).

    ``fmt`` is "csv" (UTF-8 with BOM, so Excel shows Chinese text; formula-like cells are prefixed
    with ``'``) or "xlsx" (bold frozen header, fitted widths). An export re-imports unchanged.
    """
    fmt = (fmt or "").lower()
    if fmt not in ("csv", "xlsx"):
        raise ValidationFailed(f"unknown export format {fmt!r}", details={"format": ["Choose csv or xlsx."]})
    queryset = devices.select_related(
        "node", "node__cluster", "node__pool", "device_model", "owner_project"
    ).order_by("node__cluster__slug", "node__name", "vendor", "index", "pk")
    rows = [_export_row(device) for device in queryset]
    filename = f"suanchi-ledger-{timezone.localtime():%Y%m%d-%H%M%S}.{fmt}"
    if fmt == "xlsx":
        return _xlsx_bytes(rows), XLSX_CONTENT_TYPE, filename
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(EXPORT_COLUMNS)
    for row in rows:
        writer.writerow([_csv_cell(row[name]) for name in EXPORT_COLUMNS])
    return buffer.getvalue().encode("utf-8-sig"), CSV_CONTENT_TYPE, filename
