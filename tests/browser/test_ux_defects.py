"""Issue 21 in a real browser (Chromium): charts drawn in the platform time zone with a sane axis for one
point (defect 1), a login lockout that states its real wait (2), only plotly's basic bundle loaded (6),
styled 403/404 pages in English and Chinese (8), coefficients printed plainly (9)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from tests.browser.conftest import login, switch_language

DEMO_PASSWORD = "suanchi-demo"  # apps/demo/accounts.py


def _one_point_on(job) -> datetime:
    """One utilization window of ``job`` at 08:40 UTC (16:40 in Asia/Shanghai)."""
    from apps.inventory.models import Device
    from apps.telemetry.models import JobUtilization

    at = datetime(2026, 11, 30, 8, 40, tzinfo=UTC)
    JobUtilization.objects.filter(job=job).delete()
    JobUtilization.objects.create(
        job=job,
        device=Device.objects.order_by("pk").first(),
        window_start=at,
        source="browser-test",
        quality="exact",
        share=1.0,
        busy_pct=42.0,
        project_id_snapshot=job.project_id,
    )
    return at


@pytest.mark.integration
def test_charts_error_pages_bundle_and_numbers_for_a_member(browser, live_server, demo, screenshots):
    from apps.jobs.models import Job

    job = Job.objects.filter(project__slug="vision").order_by("pk").first()
    _one_point_on(job)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    scripts: list[str] = []
    page.on(
        "request", lambda request: scripts.append(request.url) if request.resource_type == "script" else None
    )
    login(page, live_server.url, "alice", DEMO_PASSWORD)

    # Defect 1: the job's chart is drawn at 16:40 (the page's zone), says which zone, spans an hour.
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("#job-utilization-chart .main-svg")
    axis = page.evaluate(
        """() => { const g = document.getElementById('job-utilization-chart');
                   return {x: g.data[0].x, title: g._fullLayout.xaxis.title.text, range: g._fullLayout.xaxis.range,
                           ticks: Array.from(g.querySelectorAll('.xtick text')).map(t => t.textContent)}; }"""
    )
    assert axis["x"] == ["2026-11-30 16:40:00"]
    assert axis["title"] == "Time (Asia/Shanghai)"
    assert axis["range"][0].startswith("2026-11-30 16:10") and axis["range"][1].startswith("2026-11-30 17:10")
    assert axis["ticks"] and not any(re.search(r"\d\d:\d\d:\d\d\.\d", t) for t in axis["ticks"]), axis[
        "ticks"
    ]
    assert any("16:" in t or "17:" in t for t in axis["ticks"]), axis["ticks"]
    page.screenshot(path=str(screenshots / "ux-job-chart.png"), full_page=True)

    # Defect 6: only the basic plotly bundle is loaded.
    assert any("vendor/plotly/plotly-basic.min" in url for url in scripts), scripts
    assert not any(url.endswith("/plotly.min.js") for url in scripts), scripts

    # Defect 9: coefficients without trailing zeros.
    page.goto(f"{live_server.url}/catalog/models/")
    text = page.inner_text("main")
    assert not re.search(r"\d\.\d{9,}", text), re.findall(r"\d\.\d{9,}", text)[:3]

    # Defect 8: a member opening a staff page gets the layout, the reason and where to go; in Chinese too.
    for language, reason, go in (
        ("en", "This page is for platform staff only.", "Go to the fleet overview"),
        ("zh-hans", None, None),
    ):
        if language != "en":
            switch_language(page, language)
        response = page.goto(f"{live_server.url}/catalog/templates/new/")
        assert response.status == 403
        assert page.is_visible("nav.mainnav") and page.is_visible("[data-error-page='403']")
        body = page.inner_text("main")
        if reason:
            assert reason in body and go in body
        else:
            assert "Forbidden" not in body and re.search(r"[\u4e00-\u9fff]", body)
        page.screenshot(path=str(screenshots / f"ux-403.{language}.png"), full_page=True)
        response = page.goto(f"{live_server.url}/jobs/987654/")
        assert response.status == 404
        assert page.is_visible("[data-error-page='404']") and page.is_visible("nav.mainnav")
        assert "/jobs/987654/" in page.inner_text("main")
    # Staff-only actions are not offered to a member before the click.
    page.goto(f"{live_server.url}/catalog/templates/")
    assert page.locator("a[href='/catalog/templates/new/']").count() == 0
    assert page.is_visible("[data-staff-only]")
    context.close()


@pytest.mark.integration
def test_the_lockout_page_states_the_real_wait(browser, live_server, transactional_db):
    cache.clear()
    get_user_model().objects.create_user("mallory", password="pw-For-tests-1")
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    for _ in range(10):
        page.fill("input[name=username]", "mallory")
        page.fill("input[name=password]", "wrong")
        with page.expect_navigation():
            page.press("input[name=password]", "Enter")
    page.fill("input[name=username]", "mallory")
    page.fill("input[name=password]", "pw-For-tests-1")
    with page.expect_navigation() as navigation:
        page.press("input[name=password]", "Enter")
    response = navigation.value
    assert response.status == 429
    wait = int(response.headers["retry-after"])
    assert 0 < wait <= 60
    message = page.inner_text("[data-lockout]")
    seconds = int(re.search(r"Try again in (\d+) seconds?\.", message).group(1))
    assert abs(seconds - wait) <= 1 and "minute" not in message
    assert page.is_visible("input[name=username]")  # the form stays, in the layout
    context.close()
    cache.clear()
