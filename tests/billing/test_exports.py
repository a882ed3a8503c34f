"""Every export parses back and its totals equal the bill's; Chinese names survive in each format."""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal

import pytest
from openpyxl import load_workbook
from pypdf import PdfReader

from apps.billing import exports, services
from apps.billing.models import Bill
from tests.fixtures.billing import local


@pytest.fixture
def bill(make_project, devices, make_job, make_allocation):
    services.rate_card_create(
        actor="test", name="default", price_per_cu_hour=Decimal("7.7777"), effective_from=date(2026, 1, 1)
    )
    project = make_project("shijue")
    project.name = "视觉 Vision"
    project.save()
    make_allocation(
        make_job(project, name="训练-a"),
        devices[0],
        local(2026, 9, 1, 0, 10),
        local(2026, 9, 1, 5, 3),
        milli=333,
    )
    make_allocation(
        make_job(project, name="训练-b"), devices[4], local(2026, 9, 2, 0), local(2026, 9, 2, 7, 41)
    )
    services.month_close(month=date(2026, 9, 1), actor="test")
    services.adjustment_create(project=project, amount=Decimal("-1.11"), reason="退款 credit", actor="test")
    return Bill.objects.get(project=project)


def _totals(rows) -> dict[str, str]:
    return {
        row[0]: row[3] for row in rows if row and row[0] in ("usage", "adjustments", "idle share", "total")
    }


def test_the_csv_has_a_bom_and_reads_back(bill):
    content, content_type, filename = exports.bill_export(bill, "csv")
    assert content.startswith(b"\xef\xbb\xbf") and content_type.startswith("text/csv")
    assert filename == "shijue-2026-09.csv"
    rows = list(csv.reader(io.StringIO(content.decode("utf-8-sig"))))
    assert rows[1][1] == "视觉 Vision"
    totals = _totals(rows)
    assert Decimal(totals["total"]) == bill.total and Decimal(totals["usage"]) == bill.usage_amount
    job_lines = [Decimal(r[3]) for r in rows if r and r[0] == "job"]
    assert sum(job_lines) == bill.usage_amount and len(job_lines) == 2
    assert any(r[1].startswith("训练-a (#") for r in rows if r and r[0] == "job")


def test_the_xlsx_reads_back_with_numeric_cells(bill):
    content, _type, filename = exports.bill_export(bill, "xlsx")
    assert filename.endswith(".xlsx")
    sheet = load_workbook(io.BytesIO(content)).active
    rows = [[c for c in row] for row in sheet.iter_rows(values_only=True)]
    assert rows[1][1] == "视觉 Vision"
    totals = {row[0]: row[3] for row in rows if row[0] in ("usage", "total")}
    assert Decimal(str(totals["total"])) == bill.total
    resource = [Decimal(str(r[3])) for r in rows if r[0] == "resource"]
    assert sum(resource) == bill.usage_amount


def test_the_pdf_renders_chinese_and_its_total(bill):
    content, content_type, _filename = exports.bill_export(bill, "pdf")
    assert content.startswith(b"%PDF") and content_type == "application/pdf"
    text = "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)
    assert "视觉 Vision" in text and "训练-a" in text
    assert f"Total: {bill.total} {bill.currency}" in text
    assert f"{bill.usage_amount}" in text


def test_an_unknown_format_is_a_400(bill):
    from apps.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed):
        exports.bill_export(bill, "docx")


def test_close_month_command_exports_every_bill(bill, tmp_path):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = io.StringIO()
    call_command("close_month", "--month", "2026-09", "--export", str(tmp_path), stdout=out)
    assert "already closed" in out.getvalue()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "shijue-2026-09.pdf" in names and "shijue-2026-09.csv" in names and "shijue-2026-09.xlsx" in names
    with pytest.raises(CommandError, match="has not ended"):
        call_command("close_month", "--month", services.current_month().strftime("%Y-%m"), stdout=out)
    with pytest.raises(CommandError, match="YYYY-MM"):
        call_command("close_month", "--month", "2026/09", stdout=out)


def test_the_metering_task_meters_the_open_period(make_project, devices, make_job, make_allocation):
    from django.utils import timezone

    from apps.billing.models import UsageEntry
    from worker.tasks.billing import metering_task

    now = timezone.now()
    end = services.floor_hour(now)
    make_allocation(make_job(make_project("p")), devices[0], end - timezone.timedelta(hours=5), end)
    result = metering_task.run()
    assert result["created"] == 5 and UsageEntry.objects.count() == 5
    assert metering_task.run()["created"] == 0
