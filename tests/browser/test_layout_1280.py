"""Issue 29 §9 in Chromium: at 1280 px the job list shows every column, "Submitted" included, in both
languages (the table does not run past its frame, so nothing hides behind a scroll bar)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import login, switch_language

TABLE_GEOMETRY = """() => {
  const wrap = document.querySelector('.table-wrap');
  const table = wrap.querySelector('table');
  const last = table.querySelector('thead th:last-child');
  return {
    overflow: table.scrollWidth - wrap.clientWidth,
    lastRight: Math.round(last.getBoundingClientRect().right),
    wrapRight: Math.round(wrap.getBoundingClientRect().right),
    lastText: last.textContent.trim(),
    rows: table.querySelectorAll('tbody tr').length,
  };
}"""


@pytest.mark.integration
def test_the_job_list_fits_1280_px_in_both_languages(browser, live_server, demo, screenshots):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    login(page, live_server.url, "admin", "suanchi-admin")  # apps/demo/accounts.py ADMIN
    for language, header in (("en", "Submitted"), ("zh-hans", "提交时间")):
        if language != "en":
            switch_language(page, language)
        page.goto(f"{live_server.url}/jobs/")
        page.screenshot(path=str(screenshots / f"jobs-1280-{language}.png"), full_page=True)
        geometry = page.evaluate(TABLE_GEOMETRY)
        assert geometry["rows"] > 5, geometry  # the demo's jobs, long request texts included
        assert header in geometry["lastText"], geometry
        assert geometry["overflow"] <= 0, (language, geometry)
        assert geometry["lastRight"] <= geometry["wrapRight"], (language, geometry)
    context.close()
