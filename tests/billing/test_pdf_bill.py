"""The PDF bill (issue 21, defect 7): every font embedded (poppler's pdffonts), every character it prints
has a glyph in the embedded font, labels in the reader's language (pdftotext), and the parts of a
chargeback document: bill number, period, project and department, price per CU-hour × CU-hours =
amount per line, guaranteed / used / idle with the idle policy, the previous month and a chart."""

from __future__ import annotations

import shutil
import subprocess
from datetime import date
from decimal import Decimal

import pytest
from django.utils import translation

from apps.billing import exports, services
from apps.billing.models import Bill
from tests.fixtures.billing import local

POPPLER = "poppler-utils (scripts/services.sh installs it)"


@pytest.fixture
def bills(make_project, devices, make_job, make_allocation):
    services.rate_card_create(
        actor="test", name="default", price_per_cu_hour=Decimal("7.7777"), effective_from=date(2026, 1, 1)
    )
    project = make_project("shijue")
    project.name = "视觉 Vision"
    project.save()
    make_allocation(make_job(project, name="训练-a"), devices[0], local(2026, 8, 3, 1), local(2026, 8, 3, 4))
    services.month_close(month=date(2026, 8, 1), actor="test")
    make_allocation(
        make_job(project, name="训练-b"), devices[4], local(2026, 9, 2, 0), local(2026, 9, 2, 7, 41)
    )
    services.month_close(month=date(2026, 9, 1), actor="test")
    return Bill.objects.get(project=project, month=date(2026, 9, 1)), Bill.objects.get(
        project=project, month=date(2026, 8, 1)
    )


def _pdf(bill: Bill, language: str, tmp_path) -> tuple[bytes, str]:
    with translation.override(language):
        content, content_type, _name = exports.bill_export(bill, "pdf")
    assert content_type == "application/pdf"
    path = tmp_path / f"bill-{language}.pdf"
    path.write_bytes(content)
    return content, str(path)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is missing: install {POPPLER}")
    return found


def _text(path: str) -> str:
    return subprocess.run(
        [_tool("pdftotext"), "-layout", path, "-"], capture_output=True, check=True, text=True
    ).stdout


def test_pdffonts_lists_every_font_as_embedded(bills, tmp_path):
    _content, path = _pdf(bills[0], "en", tmp_path)
    listing = subprocess.run([_tool("pdffonts"), path], capture_output=True, check=True, text=True).stdout
    rows = listing.splitlines()[2:]  # after the header and its rule
    assert rows, listing
    for row in rows:
        # name type encoding emb sub uni object ID: "emb" is the 4th field from the right's "yes yes yes N 0"
        fields = row.split()
        emb, sub = fields[-5], fields[-4]
        assert (emb, sub) == ("yes", "yes"), row
    assert "Helvetica" not in listing and "STSong" not in listing


def test_every_printed_character_has_a_glyph_in_the_embedded_font(bills, tmp_path):
    from reportlab.pdfbase import pdfmetrics

    _content, path = _pdf(bills[0], "zh-hans", tmp_path)
    text = _text(path)
    font = pdfmetrics.getFont(exports.PDF_FONT)
    missing = {ch for ch in text if not ch.isspace() and ord(ch) not in font.face.charToGlyph}
    assert not missing, missing
    assert "\ufffd" not in text


def test_a_zh_reader_gets_chinese_labels(bills, tmp_path):
    _content, path = _pdf(bills[0], "zh-hans", tmp_path)
    text = _text(path)
    for label in ("项目", "部门", "币种", "明细项", "合计", "月份", "CU 时"):
        assert label in text, label
    assert "视觉 Vision" in text and "训练-b" in text
    english = _text(_pdf(bills[0], "en", tmp_path)[1])
    assert "Project" in english and "Project" not in text


def test_the_bill_is_a_chargeback_document(bills, tmp_path):
    bill, previous = bills
    _content, path = _pdf(bill, "en", tmp_path)
    text = _text(path)
    number = exports.bill_number(bill)
    assert number == f"SC-202609-{bill.project_id:05d}" and number in text
    assert exports.bill_number(Bill.objects.get(pk=bill.pk)) == number  # stable
    assert "2026-09-01 to 2026-09-30 (Asia/Shanghai)" in text
    assert "Price per CU-hour (CNY)" in text
    # A resource line: price × CU-hours = amount, all three printed.
    line = bill.lines.filter(group="resource").first()
    assert line is not None
    rate = exports._rate(bill, line)
    assert rate == Decimal("7.7777")
    assert f"{rate:f}" in text and f"{line.amount:.2f}" in text
    assert "Guaranteed CU-hours" in text and "Used CU-hours" in text and "Unused guarantee" in text
    assert "Idle policy:" in text
    # The previous month, for comparison, with its own total; and the chart's labels (drawn as text).
    assert "Compared with the previous month" in text
    assert "2026-08" in text and f"{previous.total:.2f}" in text
    assert "Used CU-hours, 2026-08" in text
    assert "\ufffd" not in text
