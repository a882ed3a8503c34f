"""Bill exports: CSV (UTF-8 with BOM, so Excel opens Chinese names), XLSX (openpyxl) and PDF
(reportlab with its built-in CID font STSong-Light: Chinese renders with no font file and no network).

The layout is the same in every format: a header block, the lines by group, then the totals.
Labels are fixed English words so the files parse back; amounts are plain decimals (cents).

Names come from ``selectors.bill_names``: a finalized bill prints the names snapshotted when it was
finalized. Every text cell of the CSV and XLSX goes through ``apps.core.exports`` (spreadsheet formula
injection, OWASP "CSV Injection"); numbers stay numbers.
"""

from __future__ import annotations

import csv
import io
import zipfile
from decimal import Decimal
from pathlib import Path

from apps.billing.models import Bill, BillingPeriod, BillLine
from apps.billing.selectors import bill_names
from apps.core.exports import csv_row, xlsx_append

FORMATS = {
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pdf": "application/pdf",
}
GROUP_TITLES = {
    BillLine.Group.RESOURCE: "By device model / template",
    BillLine.Group.JOB: "By job",
    BillLine.Group.ADJUSTMENT: "Adjustments",
    BillLine.Group.IDLE: "Idle-cost share",
}
CJK_FONT = "STSong-Light"
NUMERIC_ROWS = {*BillLine.Group.values, "usage", "adjustments", "idle share", "total"}


def _text(value: Decimal | None, places: str = "0.01") -> str:
    return "" if value is None else f"{Decimal(value).quantize(Decimal(places)):f}"


def bill_filename(bill: Bill, fmt: str) -> str:
    return f"{bill_names(bill)['project_slug']}-{bill.month:%Y-%m}.{fmt}"


def _lines(bill: Bill) -> list[BillLine]:
    order = list(GROUP_TITLES)
    return sorted(bill.lines.all(), key=lambda line: (order.index(line.group), line.position))


def bill_rows(bill: Bill) -> list[list[str]]:
    """The bill as rows of text (CSV and the PDF tables use them; XLSX keeps numbers numeric)."""
    names = bill_names(bill)
    rows: list[list[str]] = [
        ["Suanchi bill", "", "", ""],
        ["project", names["project_name"], names["project_slug"], ""],
        ["department", names["department_name"], "", ""],
        ["month", f"{bill.month:%Y-%m}", "", ""],
        ["state", bill.state, "", ""],
        ["currency", bill.currency, "", ""],
        ["used CU-hours", _text(bill.used_cu_hours, "0.000001"), "", ""],
        ["guaranteed CU-hours", _text(bill.guaranteed_cu_hours, "0.000001"), "", ""],
        [],
        ["group", "label", "CU-hours", "amount"],
    ]
    for line in _lines(bill):
        rows.append([line.group, line.label, _text(line.cu_hours, "0.000001"), _text(line.amount)])
    rows += [
        [],
        ["usage", "", "", _text(bill.usage_amount)],
        ["adjustments", "", "", _text(bill.adjustments_amount)],
        ["idle share", "", "", _text(bill.idle_share_amount)],
        ["total", "", "", _text(bill.total)],
    ]
    return rows


def bill_csv(bill: Bill) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    for row in bill_rows(bill):
        writer.writerow(csv_row(row))
    return ("\ufeff" + buffer.getvalue()).encode("utf-8")


def bill_xlsx(bill: Bill) -> bytes:
    from openpyxl import Workbook
    from openpyxl.styles import Font

    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "Bill"
    bold = Font(bold=True)
    for row in bill_rows(bill):
        cells = []
        for index, value in enumerate(row):
            numeric = (index in (2, 3) and row[0] in NUMERIC_ROWS) or (
                index == 1 and row[0] in ("used CU-hours", "guaranteed CU-hours")
            )
            if numeric and value and _is_number(value):
                cells.append(Decimal(value))
            else:
                cells.append(value)
        xlsx_append(sheet, cells)
        current = sheet.max_row
        if row and row[0] in ("Suanchi bill", "group", "total"):
            for cell in sheet[current]:
                cell.font = bold
        for col in (3, 4):
            cell = sheet.cell(row=current, column=col)
            if isinstance(cell.value, Decimal):
                cell.number_format = "0.00" if col == 4 else "0.000000"
        if row and row[0] in ("used CU-hours", "guaranteed CU-hours"):
            sheet.cell(row=current, column=2).number_format = "0.000000"
    sheet.column_dimensions["A"].width = 22
    sheet.column_dimensions["B"].width = 48
    sheet.column_dimensions["C"].width = 16
    sheet.column_dimensions["D"].width = 16
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def _is_number(text: str) -> bool:
    try:
        Decimal(text)
    except ArithmeticError:
        return False
    return True


def _register_font() -> None:
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont

    if CJK_FONT not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))


def bill_pdf(bill: Bill) -> bytes:
    from xml.sax.saxutils import escape

    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import mm
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    _register_font()
    names = bill_names(bill)
    title = ParagraphStyle("title", fontName=CJK_FONT, fontSize=16, leading=22, spaceAfter=6)
    body = ParagraphStyle("body", fontName=CJK_FONT, fontSize=9.5, leading=13)
    heading = ParagraphStyle("heading", parent=body, fontSize=11, leading=16, spaceBefore=8, spaceAfter=4)
    buffer = io.BytesIO()
    doc = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        leftMargin=16 * mm,
        rightMargin=16 * mm,
        topMargin=16 * mm,
        bottomMargin=16 * mm,
        title=f"Suanchi bill {names['project_slug']} {bill.month:%Y-%m}",
        author="Suanchi",
    )
    story: list = [
        Paragraph(escape(f"Suanchi bill {bill.month:%Y-%m}"), title),
        Paragraph(escape(f"Project: {names['project_name']} ({names['project_slug']})"), body),
        Paragraph(escape(f"Department: {names['department_name']}"), body),
        Paragraph(escape(f"State: {bill.state} · Currency: {bill.currency}"), body),
        Paragraph(
            escape(
                f"Used CU-hours: {_text(bill.used_cu_hours)} · Guaranteed CU-hours: "
                f"{_text(bill.guaranteed_cu_hours) or 'n/a'}"
            ),
            body,
        ),
    ]
    table_style = TableStyle(
        [
            ("FONTNAME", (0, 0), (-1, -1), CJK_FONT),
            ("FONTSIZE", (0, 0), (-1, -1), 9),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e4e7eb")),
            ("ALIGN", (1, 0), (-1, -1), "RIGHT"),
            ("GRID", (0, 0), (-1, -1), 0.25, colors.HexColor("#9aa5b1")),
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ]
    )
    lines = _lines(bill)
    for group, group_title in GROUP_TITLES.items():
        members = [line for line in lines if line.group == group]
        if not members:
            continue
        story.append(Paragraph(escape(group_title), heading))
        data = [["Item", "CU-hours", f"Amount ({bill.currency})"]]
        for line in members:
            data.append([Paragraph(escape(line.label), body), _text(line.cu_hours), _text(line.amount)])
        table = Table(data, colWidths=[110 * mm, 32 * mm, 36 * mm], repeatRows=1)
        table.setStyle(table_style)
        story.append(table)
    story.append(Spacer(1, 6 * mm))
    totals = [
        ["Usage", _text(bill.usage_amount)],
        ["Adjustments", _text(bill.adjustments_amount)],
        ["Idle share", _text(bill.idle_share_amount)],
        ["Total", _text(bill.total)],
    ]
    totals_table = Table(totals, colWidths=[142 * mm, 36 * mm])
    totals_table.setStyle(
        TableStyle(
            [
                ("FONTNAME", (0, 0), (-1, -1), CJK_FONT),
                ("ALIGN", (1, 0), (1, -1), "RIGHT"),
                ("LINEABOVE", (0, -1), (-1, -1), 0.75, colors.black),
            ]
        )
    )
    story.append(totals_table)
    story.append(Spacer(1, 4 * mm))
    story.append(Paragraph(escape(f"Total: {_text(bill.total)} {bill.currency}"), heading))
    doc.build(story)
    return buffer.getvalue()


RENDERERS = {"csv": bill_csv, "xlsx": bill_xlsx, "pdf": bill_pdf}


def bill_export(bill: Bill, fmt: str) -> tuple[bytes, str, str]:
    """(content, content type, file name) of one bill in csv, xlsx or pdf."""
    from apps.core.errors import ValidationFailed

    if fmt not in RENDERERS:
        raise ValidationFailed(
            f"Unknown export format {fmt!r}; use csv, xlsx or pdf.", details={"format": list(RENDERERS)}
        )
    return RENDERERS[fmt](bill), FORMATS[fmt], bill_filename(bill, fmt)


def _period_bills(period: BillingPeriod):
    return (
        period.bills.select_related("project", "project__department")
        .prefetch_related("lines")
        .order_by("project__slug")
    )


def month_export_zip(period: BillingPeriod, formats: tuple[str, ...] = ("csv", "xlsx", "pdf")) -> bytes:
    """Every bill of a month in every format, as one zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for bill in _period_bills(period):
            for fmt in formats:
                archive.writestr(bill_filename(bill, fmt), RENDERERS[fmt](bill))
    return buffer.getvalue()


def month_export_dir(period: BillingPeriod, directory: str | Path) -> list[Path]:
    """Write ``<project-slug>-<YYYY-MM>.csv|.xlsx|.pdf`` for each bill of the month into a directory."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for bill in _period_bills(period):
        for fmt, render in RENDERERS.items():
            path = target / bill_filename(bill, fmt)
            path.write_bytes(render(bill))
            written.append(path)
    return written
