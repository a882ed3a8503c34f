"""Issue 21 in a real browser (Chromium): the main navigation stays on one line at 1280 px, live pages
follow a job from pending to running without a reload, and staff change a node's state from its page
with a reason while members see no such buttons."""

from __future__ import annotations

import pytest

from tests.browser.conftest import PASSWORD, login, submit_whole_card, switch_language

DEMO_PASSWORD = "suanchi-demo"  # apps/demo/accounts.py

NAV_GEOMETRY = """() => {
  const items = Array.from(document.querySelectorAll('.mainnav li'));
  const ul = document.querySelector('.mainnav ul');
  return {
    tops: items.map(li => Math.round(li.getBoundingClientRect().top)),
    rights: items.map(li => Math.round(li.getBoundingClientRect().right)),
    viewport: window.innerWidth,
    overflow: ul.scrollWidth - ul.clientWidth,
    topbar: Math.round(document.querySelector('.topbar').getBoundingClientRect().height),
  };
}"""


@pytest.mark.integration
def test_the_main_navigation_is_one_line_at_1280_px(browser, live_server, transactional_db, screenshots):
    from django.contrib.auth import get_user_model

    # Staff see the longest menu (with "Admin"); a long user name takes room from it too.
    get_user_model().objects.create_user("platform-admin", password=PASSWORD, is_staff=True)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    login(page, live_server.url, "platform-admin", PASSWORD)
    for language in ("en", "zh-hans"):
        if language != "en":
            switch_language(page, language)
        page.goto(f"{live_server.url}/jobs/")
        page.screenshot(path=str(screenshots / f"nav-1280-{language}.png"))
        geometry = page.evaluate(NAV_GEOMETRY)
        assert len(geometry["tops"]) >= 12, geometry
        assert len(set(geometry["tops"])) == 1, (language, geometry)  # one line
        assert geometry["overflow"] <= 0, (language, geometry)  # nothing hidden or scrolled away
        assert max(geometry["rights"]) <= geometry["viewport"], (language, geometry)
    context.close()


@pytest.mark.integration
def test_the_job_page_and_the_queue_follow_a_job_from_pending_to_running(
    browser,
    live_server,
    transactional_db,
    fleet,
    member_project,
    a100,
    screenshots,
):
    """No reload: the badge changes once a scheduling cycle places the job and it starts server-side."""
    from apps.scheduling import lifecycle
    from apps.scheduling.services import scheduling_cycle_run

    user, project = member_project
    job = submit_whole_card(user, project, a100, "live-train")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    login(page, live_server.url, user.username, PASSWORD)
    queue = context.new_page()
    queue.goto(f"{live_server.url}/jobs/")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    badge = f'[data-live-key="job-{job.pk}-state"]'
    assert page.get_attribute(badge, "data-value") == "pending"
    assert queue.get_attribute(badge, "data-value") == "pending"
    loads = page.evaluate("performance.getEntriesByType('navigation').length")

    scheduling_cycle_run()
    job.refresh_from_db()
    assert lifecycle.job_to_running(job=job, actor="reconciler")  # what the reconciler does on Running

    # Polled every 3 s on the job page, 5 s on the list: bounded by two periods and a margin.
    page.wait_for_selector(f'{badge}[data-value="running"]', timeout=12_000)
    assert page.inner_text(badge).strip().lower() == "running"
    assert "badge--ok" in page.get_attribute(badge, "class")
    queue.wait_for_selector(f'{badge}[data-value="running"]', timeout=15_000)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads  # no reload
    page.screenshot(path=str(screenshots / "live-job-running.png"))

    # A hidden tab stops polling; shown again, it polls at once.
    page.evaluate(
        """() => { window.__polls = 0; const f = window.fetch;
                   window.fetch = function () { window.__polls++; return f.apply(this, arguments); };
                   Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
                   document.dispatchEvent(new Event('visibilitychange')); }"""
    )
    page.wait_for_timeout(7_000)
    assert page.evaluate("window.__polls") == 0
    page.evaluate(
        """() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
                   document.dispatchEvent(new Event('visibilitychange')); }"""
    )
    page.wait_for_function("window.__polls > 0", timeout=3_000)
    context.close()
