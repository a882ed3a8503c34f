"""Issue 29 §7 in a real browser (Chromium): the queue board at /quotas/board/ for a member and for
staff, in English and in Chinese — the share-vs-use chart drawn by static/js/charts.js, the "why is
my share X?" panel, no console error and no Content-Security-Policy violation. Screenshots go to
test-output/screenshots/queue-board.<who>.<language>.png."""

from __future__ import annotations

import pytest

from apps.accounts.models import Department
from tests.browser.conftest import PASSWORD, login, switch_language
from tests.browser.test_pages import CSP_LISTENER
from tests.quotas.test_board import build_scene


@pytest.mark.integration
def test_the_queue_board_in_both_languages(
    browser, live_server, transactional_db, fleet, a100, ascend, make_user, make_project, screenshots
):
    research = Department.objects.create(name="Research", slug="research")
    staff = make_user("ops", staff=True, password=PASSWORD)
    alice, carol = make_user("alice", password=PASSWORD), make_user("carol", password=PASSWORD)
    vision = make_project("vision", department=research, members=[alice])
    lidar = make_project("lidar-secret", department=research, members=[carol])
    build_scene(staff=staff, alice=alice, carol=carol, vision=vision, lidar=lidar, a100=a100, ascend=ascend)

    for who, user in (("member", alice), ("staff", staff)):
        for language in ("en", "zh-hans"):
            context = browser.new_context(viewport={"width": 1440, "height": 900}, locale=language)
            context.add_init_script(CSP_LISTENER)
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            login(page, live_server.url, user.username, PASSWORD)
            if language != "en":
                switch_language(page, language)
            response = page.goto(f"{live_server.url}/quotas/board/?project=vision")
            assert response.status == 200
            page.wait_for_load_state("networkidle")
            assert page.locator("html").get_attribute("lang") == language
            # The chart is drawn (plotly's SVG) from the JSON block, by the page's own static script.
            page.wait_for_selector("#board-share-chart .main-svg", timeout=10_000)
            assert page.locator('[data-board-row="vision"]').count() == 1
            assert page.locator("[data-why] li").count() >= 5
            assert page.locator('[data-starved-category="device"]').get_attribute("data-count") == (
                "2" if who == "member" else "4"
            )
            body = page.inner_text("main")
            if who == "member":
                assert "lidar-secret" not in page.content()
            else:
                assert page.locator('[data-board-row="lidar-secret"]').count() == 1
            if language == "zh-hans":
                assert "队列看板" in body and "为什么 vision 的份额是" in body
                assert "is guaranteed" not in body and "wait because of" not in body
            else:
                assert "Why is the share of vision" in body
            # The project picker submits itself (static/js/suanchi.js data-autosubmit), no inline script.
            if who == "staff":
                with page.expect_navigation():
                    page.select_option("#board-project", "lidar-secret")
                page.wait_for_load_state("networkidle")
                assert page.locator('[data-why-project="lidar-secret"]').count() == 1
                page.goto(f"{live_server.url}/quotas/board/?project=vision")
                page.wait_for_load_state("networkidle")
            name = f"queue-board.{who}.{language}.png"
            page.screenshot(path=str(screenshots / name), full_page=True)
            assert (screenshots / name).stat().st_size > 10_000
            assert page.evaluate("window.__cspViolations") == []
            assert errors == [], errors
            context.close()
