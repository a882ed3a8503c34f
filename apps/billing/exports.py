"""Bill exports: CSV (UTF-8 with BOM, so Excel opens Chinese names), XLSX (openpyxl) and PDF
(reportlab, embedding Debian's WenQuanYi Micro Hei: see PDF_FONT below).

The layout is the same in every format: a header block, the lines by group, then the totals.
CSV and XLSX labels are fixed English words so the files parse back; the PDF is a document for people,
in the reader's language. Amounts are plain decimals (cents).

Names come from ``selectors.bill_names``: a finalized bill prints the names snapshotted when it was
finalized. Every text cell of the CSV and XLSX goes through ``apps.core.exports`` (spreadsheet formula
injection, OWASP "CSV Injection"); numbers stay numbers.
"""

from __future__ import annotations

import csv
import io
import zipfile
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from apps.billing.models import Bill, BillingPeriod, BillLine
from apps.billing.selectors import bill_names, entries_of_job
from apps.core.exports import csv_row, xlsx_append
from apps.core.formatting import format_datetime
from apps.core.stored_text import localize

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
NUMERIC_ROWS = {*BillLine.Group.values, "usage", "adjustments", "idle share", "total"}


def _text(value: Decimal | None, places: str = "0.01") -> str:
    return "" if value is None else f"{Decimal(value).quantize(Decimal(places)):f}"


def bill_filename(bill: Bill, fmt: str) -> str:
    return f"{bill_names(bill)['project_slug']}-{bill.month:%Y-%m}.{fmt}"


def _lines(bill: Bill) -> list[BillLine]:
    order = list(GROUP_TITLES)
    return sorted(bill.lines.all(), key=lambda line: (order.index(line.group), line.position))


# The first column's labels, in the reader's language (issue 29 §1: a zh-hans reader's bill file reads
# in Chinese; in English they are the keys they always were). Row kind -> label.
ROW_LABELS = {
    "title": gettext_lazy("Suanchi bill"),
    "project": gettext_lazy("project"),
    "department": gettext_lazy("department"),
    "month": gettext_lazy("month"),
    "state": gettext_lazy("state"),
    "currency": gettext_lazy("currency"),
    "used CU-hours": gettext_lazy("used CU-hours"),
    "guaranteed CU-hours": gettext_lazy("guaranteed CU-hours"),
    "header": gettext_lazy("group"),
    "usage": gettext_lazy("usage"),
    "adjustments": gettext_lazy("adjustments"),
    "idle share": gettext_lazy("idle share"),
    "total": gettext_lazy("total"),
}
# A line's group (the words "resource", "job", "adjustment", "idle" in English).
GROUP_WORDS = {
    BillLine.Group.RESOURCE: gettext_lazy("resource"),
    BillLine.Group.JOB: gettext_lazy("job"),
    BillLine.Group.ADJUSTMENT: gettext_lazy("adjustment"),
    BillLine.Group.IDLE: gettext_lazy("idle"),
}


def _bill_table(bill: Bill) -> list[tuple[str, list[str]]]:
    """The bill as (row kind, row of text): the kind is a group or a key of ``ROW_LABELS``."""
    names = bill_names(bill)
    rows: list[tuple[str, list[str]]] = [
        ("title", ["", "", "", ""]),
        ("project", ["", names["project_name"], names["project_slug"], ""]),
        ("department", ["", names["department_name"], "", ""]),
        ("month", ["", f"{bill.month:%Y-%m}", "", ""]),
        ("state", ["", str(Bill.State(bill.state).label), "", ""]),
        ("currency", ["", bill.currency, "", ""]),
        ("used CU-hours", ["", _text(bill.used_cu_hours, "0.000001"), "", ""]),
        ("guaranteed CU-hours", ["", _text(bill.guaranteed_cu_hours, "0.000001"), "", ""]),
        ("", []),
        ("header", ["", _("label"), _("CU-hours"), _("amount")]),
    ]
    for line in _lines(bill):
        # The idle line's label is the service's stored English (IDLE_LINE_LABEL); the others are names.
        label = localize(line.label) if line.group == BillLine.Group.IDLE else line.label
        rows.append(
            (
                line.group,
                [str(GROUP_WORDS[line.group]), label, _text(line.cu_hours, "0.000001"), _text(line.amount)],
            )
        )
    rows += [
        ("", []),
        ("usage", ["", "", "", _text(bill.usage_amount)]),
        ("adjustments", ["", "", "", _text(bill.adjustments_amount)]),
        ("idle share", ["", "", "", _text(bill.idle_share_amount)]),
        ("total", ["", "", "", _text(bill.total)]),
    ]
    for kind, row in rows:
        if kind in ROW_LABELS:
            row[0] = str(ROW_LABELS[kind])
    return rows


def bill_rows(bill: Bill) -> list[list[str]]:
    """The bill as rows of text (CSV and the PDF tables use them; XLSX keeps numbers numeric)."""
    return [row for _kind, row in _bill_table(bill)]


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
    sheet.title = _("Bill")
    bold = Font(bold=True)
    for kind, row in _bill_table(bill):
        cells: list[Decimal | str] = []
        for index, value in enumerate(row):
            numeric = (index in (2, 3) and kind in NUMERIC_ROWS) or (
                index == 1 and kind in ("used CU-hours", "guaranteed CU-hours")
            )
            if numeric and value and _is_number(value):
                cells.append(Decimal(value))
            else:
                cells.append(value)
        xlsx_append(sheet, cells)
        current = sheet.max_row
        if kind in ("title", "header", "total"):
            for cell in sheet[current]:
                cell.font = bold
        for col in (3, 4):
            cell = sheet.cell(row=current, column=col)
            if isinstance(cell.value, Decimal):
                cell.number_format = "0.00" if col == 4 else "0.000000"
        if kind in ("used CU-hours", "guaranteed CU-hours"):
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


# The PDF embeds a CJK-capable TrueType font, subset to the characters used (pdffonts: "emb yes"): Debian's
# fonts-wqy-microhei (installed by scripts/services.sh), looked up under the XDG data directories
# (https://specifications.freedesktop.org/basedir-spec/latest/), or the file SUANCHI_PDF_FONT names.
# Nothing is downloaded. ReportLab embeds TTF subsets: https://docs.reportlab.com/reportlab/userguide/ch3_fonts/
PDF_FONT = "SuanchiCJK"
PDF_FONT_FILES = ("fonts/truetype/wqy/wqy-microhei.ttc", "fonts/wqy-microhei/wqy-microhei.ttc")


def pdf_font_path() -> Path:
    """The font file the PDF bill embeds; ImproperlyConfigured when none is installed."""
    import os

    from django.core.exceptions import ImproperlyConfigured

    configured = os.environ.get("SUANCHI_PDF_FONT")
    if configured:
        return Path(configured)
    data_dirs = (os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")
    for folder in data_dirs:
        for name in PDF_FONT_FILES:
            candidate = Path(folder) / name
            if candidate.is_file():
                return candidate
    raise ImproperlyConfigured(
        "No CJK font for the PDF bill: install Debian's fonts-wqy-microhei (scripts/services.sh does) "
        "or set SUANCHI_PDF_FONT to a TrueType file"
    )


def _register_font() -> None:
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    if PDF_FONT not in pdfmetrics.getRegisteredFontNames():
        path = pdf_font_path()
        # A .ttc holds several faces; WenQuanYi Micro Hei is the first.
        pdfmetrics.registerFont(TTFont(PDF_FONT, str(path), subfontIndex=0))


def bill_number(bill: Bill) -> str:
    """A stable number: one bill per project and month (billing_bill_one_per_month)."""
    return f"SC-{bill.month:%Y%m}-{bill.project_id:05d}"


def _previous_bill(bill: Bill) -> Bill | None:
    from apps.billing.services import previous_month

    return Bill.objects.filter(project_id=bill.project_id, month=previous_month(bill.month)).first()


def _rate(bill: Bill, line: BillLine) -> Decimal | None:
    """Price per CU-hour of a resource or job line: what its usage entries were charged per CU-hour
    (the rate card's price net of the project's discount; a blend when several rates applied)."""
    from django.db.models import Sum

    from apps.billing.models import UsageEntry

    if line.group == BillLine.Group.RESOURCE:
        entries = UsageEntry.objects.filter(
            device_model_id=line.device_model_id, template_id=line.template_id
        )
    elif line.group == BillLine.Group.JOB and line.job_id:
        entries = entries_of_job(UsageEntry.objects.all(), line.job_id)
    else:
        return None
    sums = entries.filter(project_id=bill.project_id, month=bill.month).aggregate(
        amount=Sum("amount"), cu_hours=Sum("cu_hours")
    )
    if not sums["cu_hours"]:
        return None
    return (sums["amount"] / sums["cu_hours"]).quantize(Decimal("0.0001"))


IDLE_POLICY_TEXT = {
    "none": gettext_noop("Idle policy: unused capacity is not charged; the idle share is zero."),
    "spread": gettext_noop(
        "Idle policy: the cost of capacity nobody used is spread over the projects in proportion to their use."
    ),
    "platform": gettext_noop("Idle policy: the cost of capacity nobody used is carried by the platform."),
}


def _bar_chart(rows: list[tuple[str, Decimal]], unit: str):
    """A small horizontal bar chart drawn straight on the page in the embedded font (ReportLab's
    graphics renderer would start each drawing in its own, unembedded, Times-Roman)."""
    from reportlab.lib import colors
    from reportlab.lib.units import mm
    from reportlab.platypus import Flowable

    palette = ("#3b6ea5", "#2f855a", "#9aa5b1", "#d69e2e")
    bar_h, gap, label_w, width = 5 * mm, 2.5 * mm, 52 * mm, 178 * mm
    top = max((float(v) for _label, v in rows), default=0.0) or 1.0

    class BarChart(Flowable):
        def wrap(self, *_args):
            return width, len(rows) * (bar_h + gap) + gap

        def draw(self):
            canvas = self.canv
            height = len(rows) * (bar_h + gap) + gap
            for i, (label, value) in enumerate(rows):
                y = height - (i + 1) * (bar_h + gap)
                length = max((width - label_w - 40 * mm) * float(value) / top, 0.5)
                canvas.setFont(PDF_FONT, 8)
                canvas.setFillColor(colors.black)
                canvas.drawString(0, y + 1.4 * mm, label)
                canvas.setFillColor(colors.HexColor(palette[i % len(palette)]))
                canvas.rect(label_w, y, length, bar_h, stroke=0, fill=1)
                canvas.setFillColor(colors.black)
                canvas.drawString(label_w + length + 2 * mm, y + 1.4 * mm, f"{_text(value)} {unit}")

    return BarChart()


def _pdf_line_tables(bill: Bill, *, lines, para, heading, table_style) -> list:
    """The bill's lines, one table per group: price per CU-hour, CU-hours, amount."""
    from django.utils.translation import gettext as _
    from reportlab.lib.units import mm
    from reportlab.platypus import Table

    cur = bill.currency
    story: list = []
    group_titles = {
        BillLine.Group.RESOURCE: _("By device model / template"),
        BillLine.Group.JOB: _("By job"),
        BillLine.Group.ADJUSTMENT: _("Adjustments"),
        BillLine.Group.IDLE: _("Idle-cost share"),
    }
    for group, group_title in group_titles.items():
        members = [line for line in lines if line.group == group]
        if not members:
            continue
        story.append(para(group_title, heading))
        data = [
            [
                _("Item"),
                _("Price per CU-hour (%(currency)s)") % {"currency": cur},
                _("CU-hours"),
                _("Amount (%(currency)s)") % {"currency": cur},
            ]
        ]
        for line in members:
            rate = _rate(bill, line)
            data.append(
                [
                    para(line.label),
                    "" if rate is None else f"{rate:f}",
                    _text(line.cu_hours),
                    _text(line.amount),
                ]
            )
        table = Table(data, colWidths=[88 * mm, 32 * mm, 26 * mm, 32 * mm], repeatRows=1)
        table.setStyle(table_style)
        story.append(table)
    return story


def _pdf_share(bill: Bill, guaranteed, used: Decimal, *, policy, para, heading, small) -> list:
    """Guaranteed, used and idle CU-hours with the idle-cost share and what the idle policy means."""
    from django.utils.translation import gettext as _
    from reportlab.lib.units import mm
    from reportlab.platypus import Table, TableStyle

    cur = bill.currency
    story: list = []
    idle = max(Decimal(guaranteed) - used, Decimal(0)) if guaranteed is not None else None
    story.append(para(_("Guaranteed, used and idle"), heading))
    share = [
        [_("Guaranteed CU-hours"), _text(guaranteed) or _("no guarantee")],
        [_("Used CU-hours"), _text(used)],
        [_("Unused guarantee (CU-hours)"), _text(idle) if idle is not None else "—"],
        [_("Idle-cost share (%(currency)s)") % {"currency": cur}, _text(bill.idle_share_amount)],
    ]
    share_table = Table(share, colWidths=[146 * mm, 32 * mm])
    share_table.setStyle(
        TableStyle([("FONTNAME", (0, 0), (-1, -1), PDF_FONT), ("ALIGN", (1, 0), (1, -1), "RIGHT")])
    )
    story.append(share_table)
    story.append(para(_(IDLE_POLICY_TEXT.get(policy, IDLE_POLICY_TEXT["none"])), small))

    return story


def _pdf_comparison(bill: Bill, guaranteed, used: Decimal, *, para, heading, small, table_style) -> list:
    """The previous month beside this one, and the small chart."""
    from django.utils.translation import gettext as _
    from reportlab.lib.units import mm
    from reportlab.platypus import Spacer, Table

    cur = bill.currency
    story: list = []
    previous = _previous_bill(bill)
    story.append(para(_("Compared with the previous month"), heading))
    rows = [[_("Month"), _("CU-hours"), _("Total (%(currency)s)") % {"currency": cur}]]
    if previous is not None:
        rows.append([f"{previous.month:%Y-%m}", _text(previous.used_cu_hours), _text(previous.total)])
    rows.append([f"{bill.month:%Y-%m}", _text(bill.used_cu_hours), _text(bill.total)])
    compare = Table(rows, colWidths=[88 * mm, 45 * mm, 45 * mm])
    compare.setStyle(table_style)
    story.append(compare)
    if previous is None:
        story.append(para(_("No bill for the previous month."), small))
    chart_rows = [(_("Guaranteed CU-hours"), Decimal(guaranteed or 0)), (_("Used CU-hours"), used)]
    if previous is not None:
        chart_rows.append(
            (
                _("Used CU-hours, %(month)s") % {"month": f"{previous.month:%Y-%m}"},
                Decimal(previous.used_cu_hours),
            )
        )
    story.append(Spacer(1, 3 * mm))
    story.append(_bar_chart(chart_rows, _("CU-h")))

    return story


def _pdf_totals(bill: Bill, *, para, heading) -> list:
    """Usage, adjustments, idle share and the total."""
    from django.utils.translation import gettext as _
    from reportlab.lib import colors
    from reportlab.lib.units import mm
    from reportlab.platypus import Spacer, Table, TableStyle

    cur = bill.currency
    story: list = []
    story.append(Spacer(1, 6 * mm))
    totals = [
        [_("Usage"), _text(bill.usage_amount)],
        [_("Adjustments"), _text(bill.adjustments_amount)],
        [_("Idle share"), _text(bill.idle_share_amount)],
        [_("Total"), _text(bill.total)],
    ]
    totals_table = Table(totals, colWidths=[142 * mm, 36 * mm])
    totals_table.setStyle(
        TableStyle(
            [
                ("FONTNAME", (0, 0), (-1, -1), PDF_FONT),
                ("ALIGN", (1, 0), (1, -1), "RIGHT"),
                ("LINEABOVE", (0, -1), (-1, -1), 0.75, colors.black),
            ]
        )
    )
    story.append(totals_table)
    story.append(Spacer(1, 4 * mm))
    story.append(
        para(_("Total: %(amount)s %(currency)s") % {"amount": _text(bill.total), "currency": cur}, heading)
    )
    return story


def bill_pdf(bill: Bill) -> bytes:
    """A chargeback document in the reader's language: number, period, project and department, lines with
    their rate (price per CU-hour × CU-hours = amount), guaranteed / used / idle with the idle policy, the
    previous month for comparison and a small chart. One embedded font for every glyph."""
    from xml.sax.saxutils import escape

    from django.utils import formats
    from django.utils.translation import gettext as _
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import mm
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table, TableStyle

    from apps.billing.models import IdlePolicy
    from apps.billing.services import month_bounds

    _register_font()
    names = bill_names(bill)
    number = bill_number(bill)
    start, end = month_bounds(bill.month)
    last_day = end - timedelta(days=1)
    title = ParagraphStyle("title", fontName=PDF_FONT, fontSize=16, leading=22, spaceAfter=6)
    body = ParagraphStyle("body", fontName=PDF_FONT, fontSize=9.5, leading=13)
    small = ParagraphStyle("small", parent=body, fontSize=8, leading=11, textColor=colors.HexColor("#52606d"))
    heading = ParagraphStyle("heading", parent=body, fontSize=11, leading=16, spaceBefore=8, spaceAfter=4)
    cur = bill.currency
    buffer = io.BytesIO()
    doc = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        leftMargin=16 * mm,
        rightMargin=16 * mm,
        topMargin=16 * mm,
        bottomMargin=16 * mm,
        title=f"{number} {names['project_slug']} {bill.month:%Y-%m}",
        author="Suanchi",
        # The canvas's own default font (Helvetica, never embedded) is replaced too: every font is embedded.
        initialFontName=PDF_FONT,
    )

    def para(text: str, style=body) -> Paragraph:
        return Paragraph(escape(text), style)

    policy = bill.period.idle_policy if bill.period_id else IdlePolicy.NONE
    period_text = _("%(start)s to %(end)s (%(zone)s)") % {
        "start": formats.date_format(start.date(), "SHORT_DATE_FORMAT"),
        "end": formats.date_format(last_day.date(), "SHORT_DATE_FORMAT"),
        "zone": str(start.tzinfo),
    }
    facts = [
        [_("Bill number"), number],
        [_("Billing period"), period_text],
        [_("Project"), f"{names['project_name']} ({names['project_slug']})"],
        [_("Department"), names["department_name"]],
        [_("State"), str(Bill.State(bill.state).label)],
        [_("Currency"), cur],
    ]
    if bill.finalized_at:
        facts.append([_("Finalized"), format_datetime(bill.finalized_at)])
    story: list = [para(_("Suanchi chargeback bill %(month)s") % {"month": f"{bill.month:%Y-%m}"}, title)]
    facts_table = Table([[para(k), para(v)] for k, v in facts], colWidths=[40 * mm, 138 * mm])
    facts_table.setStyle(
        TableStyle([("FONTNAME", (0, 0), (-1, -1), PDF_FONT), ("VALIGN", (0, 0), (-1, -1), "TOP")])
    )
    story.append(facts_table)
    table_style = TableStyle(
        [
            ("FONTNAME", (0, 0), (-1, -1), PDF_FONT),
            ("FONTSIZE", (0, 0), (-1, -1), 9),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e4e7eb")),
            ("ALIGN", (1, 0), (-1, -1), "RIGHT"),
            ("GRID", (0, 0), (-1, -1), 0.25, colors.HexColor("#9aa5b1")),
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ]
    )
    story += _pdf_line_tables(bill, lines=_lines(bill), para=para, heading=heading, table_style=table_style)
    story.append(para(_("Price per CU-hour: the rate card's price after any project discount."), small))

    guaranteed, used = bill.guaranteed_cu_hours, Decimal(bill.used_cu_hours)
    story += _pdf_share(bill, guaranteed, used, policy=policy, para=para, heading=heading, small=small)
    story += _pdf_comparison(
        bill, guaranteed, used, para=para, heading=heading, small=small, table_style=table_style
    )
    story += _pdf_totals(bill, para=para, heading=heading)
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
