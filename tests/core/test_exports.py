"""The one spreadsheet-cell rule every export uses (OWASP "CSV Injection")."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from openpyxl import Workbook, load_workbook

from apps.core.exports import csv_cell, formula_escape, formula_unescape, xlsx_append


@pytest.mark.parametrize("text", ["=2+3", "+cmd", "-x", "@SUM(1)", "\t=1", "\r=1", "-inf", "-1+2", "-"])
def test_formula_like_text_gets_a_quote_and_comes_back(text):
    assert formula_escape(text) == "'" + text
    assert formula_unescape(formula_escape(text)) == text


@pytest.mark.parametrize("text", ["-12.50", "+3", "-1e-3", "0", "abc", "", "视觉"])
def test_numbers_and_plain_text_are_left_alone(text):
    assert formula_escape(text) == text


def test_a_leading_quote_before_a_trigger_is_doubled_so_the_escape_is_reversible():
    assert formula_escape("'=x") == "''=x" and formula_unescape("''=x") == "'=x"
    assert formula_escape("'plain") == "'plain"


def test_csv_cells_keep_numbers_numeric():
    assert [csv_cell(v) for v in (None, -5, Decimal("-1.20"), -0.5, True, "=1")] == [
        "",
        "-5",
        "-1.20",
        "-0.5",
        "True",
        "'=1",
    ]


def test_xlsx_rows_hold_text_never_formulas_and_numbers_as_numbers():
    workbook = Workbook()
    xlsx_append(workbook.active, ['=HYPERLINK("http://x")', "-text", Decimal("-2.5"), "ok\x07"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    a, b, c, d = load_workbook(io.BytesIO(buffer.getvalue())).active[1]
    assert (a.data_type, a.value, a.quotePrefix) == ("s", '=HYPERLINK("http://x")', True)
    assert (b.data_type, b.quotePrefix) == ("s", True)
    assert (c.data_type, c.value) == ("n", -2.5)
    assert d.value == "ok" and not d.quotePrefix
