"""Billing integrity: a finalized bill's documents keep their names; a month is closed only when it can
be (ended, after the platform's first use, and no card over-booked in it)."""

from __future__ import annotations

import csv
import io
from datetime import date, datetime
from decimal import Decimal

import pytest
from openpyxl import load_workbook
from pypdf import PdfReader

from apps.accounts.models import Department
from apps.billing import exports, services
from apps.billing.models import Bill, BillingPeriod
from apps.core.errors import Conflict
from tests.fixtures.billing import local

SEP = date(2026, 9, 1)


@pytest.fixture
def project(make_project):
    project = make_project("shijue")
    project.name = "视觉 Vision"
    project.save()
    Department.objects.filter(pk=project.department_id).update(name="研发部 R&D")
    return project


def _texts(bill: Bill) -> dict[str, str]:
    csv_text = exports.bill_export(bill, "csv")[0].decode("utf-8-sig")
    sheet = load_workbook(io.BytesIO(exports.bill_export(bill, "xlsx")[0])).active
    xlsx_text = " ".join(str(c.value) for row in sheet.iter_rows() for c in row if c.value is not None)
    pdf = PdfReader(io.BytesIO(exports.bill_export(bill, "pdf")[0]))
    pdf_text = " ".join(page.extract_text() for page in pdf.pages)
    return {"csv": csv_text, "xlsx": xlsx_text, "pdf": pdf_text}


def test_a_finalized_bills_documents_keep_the_names_it_was_finalized_with(
    project, devices, make_job, make_allocation
):
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    services.month_close(month=SEP, actor="test")
    bill = Bill.objects.get(project=project)
    assert (bill.project_name, bill.project_slug, bill.department_name) == (
        "视觉 Vision",
        "shijue",
        "研发部 R&D",
    )
    project.name = "Renamed Vision"
    project.slug = "renamed"
    project.save()
    Department.objects.filter(pk=project.department_id).update(name="Renamed Dept")
    bill = Bill.objects.select_related("project__department").get(pk=bill.pk)
    for fmt, text in _texts(bill).items():
        assert "视觉 Vision" in text and "研发部 R&D" in text, fmt
        assert "Renamed" not in text, fmt
    assert exports.bill_filename(bill, "csv") == "shijue-2026-09.csv"


def test_a_draft_shows_live_names_and_bill_finalize_snapshots_them(
    project, devices, make_job, make_allocation
):
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    services.month_close(month=SEP, actor="test", finalize=False)
    bill = Bill.objects.get(project=project)
    assert bill.project_name == ""
    project.name = "Live Name"
    project.save()
    assert "Live Name" in _texts(Bill.objects.get(pk=bill.pk))["csv"]
    services.bill_finalize(bill=bill, actor="test")
    project.name = "Later Name"
    project.save()
    text = _texts(Bill.objects.get(pk=bill.pk))["csv"]
    assert "Live Name" in text and "Later Name" not in text


def test_bill_csv_and_xlsx_neutralize_formula_like_names(project, devices, make_job, make_allocation):
    project.name = '=HYPERLINK("http://evil.example","x")'
    project.save()
    make_allocation(make_job(project, name="@SUM(1)"), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    services.rate_card_create(
        actor="test", name="default", price_per_cu_hour=Decimal("2.0000"), effective_from=date(2026, 1, 1)
    )
    services.month_close(month=SEP, actor="test", finalize=False)
    bill = Bill.objects.get(project=project)
    rows = list(csv.reader(io.StringIO(exports.bill_export(bill, "csv")[0].decode("utf-8-sig"))))
    assert ["project", "'" + project.name, "shijue", ""] in rows
    assert any(row[:2] == ["job", f"'@SUM(1) (#{bill.lines.get(group='job').job_id})"] for row in rows)
    sheet = load_workbook(io.BytesIO(exports.bill_export(bill, "xlsx")[0])).active
    cells = [c for row in sheet.iter_rows() for c in row if c.value is not None]
    assert all(c.data_type != "f" for c in cells)
    name_cell = next(c for c in cells if c.value == project.name)
    assert name_cell.data_type == "s" and name_cell.quotePrefix


def test_closing_a_month_before_the_first_usage_is_a_400_and_writes_nothing(
    api_client, staff_user, project, devices, make_job, make_allocation
):
    api_client.force_authenticate(staff_user)
    response = api_client.post("/api/billing/periods/close/", {"month": "1900-01"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "month_before_first_use"
    make_allocation(make_job(project), devices[0], local(2026, 9, 3, 0), local(2026, 9, 3, 3))
    response = api_client.post("/api/billing/periods/close/", {"month": "2026-08"}, format="json")
    message = response.json()["error"]["message"]
    assert response.status_code == 400 and "first usage" in message
    assert (
        "2026-09-03 00:00" in message and "T00:00:00" not in message
    )  # the pages' date format (issue 29 §9)
    assert not BillingPeriod.objects.exists() and not Bill.objects.exists()
    current = services.current_month().strftime("%Y-%m")
    response = api_client.post("/api/billing/periods/close/", {"month": current}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "month_not_ended"
    assert (
        api_client.post("/api/billing/periods/close/", {"month": "2026-09"}, format="json").status_code == 200
    )


def test_a_month_with_a_double_booked_card_is_refused_with_a_report(
    api_client, staff_user, project, devices, make_job, make_allocation
):
    first = make_allocation(
        make_job(project, name="a"), devices[0], local(2026, 9, 5, 0), local(2026, 9, 5, 6)
    )
    second = make_allocation(
        make_job(project, name="b"), devices[0], local(2026, 9, 5, 4), local(2026, 9, 5, 8)
    )
    api_client.force_authenticate(staff_user)
    response = api_client.post("/api/billing/periods/close/", {"month": "2026-09"}, format="json")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "capacity_exceeded" and error["details"]["count"] == 1
    violation = error["details"]["violations"][0]
    assert violation["device"] == str(devices[0])
    assert violation["allocations"] == [first.pk, second.pk]
    assert "whole card" in violation["exceeded"]
    assert datetime.fromisoformat(violation["from"]) == local(2026, 9, 5, 4)
    assert datetime.fromisoformat(violation["until"]) == local(2026, 9, 5, 6)
    assert not Bill.objects.exists()
    assert not BillingPeriod.objects.exclude(state="open").exists()


def test_back_to_back_allocations_on_one_card_close_fine(project, devices, make_job, make_allocation):
    make_allocation(make_job(project, name="a"), devices[0], local(2026, 9, 5, 0), local(2026, 9, 5, 4))
    make_allocation(make_job(project, name="b"), devices[0], local(2026, 9, 5, 4), local(2026, 9, 5, 8))
    assert services.month_close(month=SEP, actor="test").state == "closed"


def test_finalizing_a_draft_bill_rechecks_the_capacity_invariant(project, devices, make_job, make_allocation):
    make_allocation(make_job(project, name="a"), devices[0], local(2026, 9, 5, 0), local(2026, 9, 5, 6))
    services.month_close(month=SEP, actor="test", finalize=False)
    make_allocation(make_job(project, name="b"), devices[0], local(2026, 9, 5, 2), local(2026, 9, 5, 3))
    bill = Bill.objects.get(project=project)
    with pytest.raises(Conflict) as caught:
        services.bill_finalize(bill=bill, actor="test")
    assert caught.value.code == "capacity_exceeded"
    assert Bill.objects.get(pk=bill.pk).state == "draft"
