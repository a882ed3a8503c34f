"""Issue 29 §2 in a real browser (Chromium): the job page left open follows a blocker's cancel in
every section — "Why pending", the ETA, the allocations, the timeline — and the job list its rows,
without a reload, within one scheduling cycle; no console error, no CSP violation."""

from __future__ import annotations

import pytest

from tests.browser.conftest import PASSWORD, login, switch_language
from tests.browser.test_pages import CSP_LISTENER

# Polled every 3 s on the job page, 5 s on the list: two periods and a margin.
JOB_PAGE_WAIT_MS = 12_000
LIST_WAIT_MS = 15_000


@pytest.mark.integration
def test_a_blockers_cancel_reaches_the_waiting_jobs_page_without_a_reload(
    browser, live_server, transactional_db, fleet, member_project, a100, screenshots
):
    from apps.clusters.pusher import push_job_run
    from apps.scheduling.services import scheduling_cycle_run
    from tests.scheduling.test_live_sections import _run, _submit, release

    alice, vision = member_project
    alice.set_password(PASSWORD)
    alice.save()
    blocker = _submit(vision, alice, a100, "blocker", count=4, expected_duration_s=14 * 60)
    other = _submit(vision, alice, a100, "other", count=4, expected_duration_s=60 * 60)
    scheduling_cycle_run()
    blocker, other = _run(blocker), _run(other)
    waiting = _submit(vision, alice, a100, "waiting", count=4)
    scheduling_cycle_run()

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(CSP_LISTENER)
    errors: list[str] = []
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    login(page, live_server.url, alice.username, PASSWORD)
    page.goto(f"{live_server.url}/jobs/{waiting.pk}/")
    why = f'[data-live-section="job-{waiting.pk}-why"]'
    allocations = f'[data-live-section="job-{waiting.pk}-allocations"]'
    timeline = f'[data-live-section="job-{waiting.pk}-timeline"]'
    eta_link = f'{why} #why-eta a[href="/jobs/{blocker.pk}/"]'
    assert page.locator(f"{why} #why-pending").count() == 1
    assert page.locator(eta_link).count() == 1  # "Expected to start after job blocker finishes"
    assert "No cards have been allocated" in page.inner_text(allocations)
    page.wait_for_selector("#job-pod #job-pod-none", timeout=JOB_PAGE_WAIT_MS)  # no cluster yet
    page.screenshot(path=str(screenshots / "live-sections-pending.en.png"), full_page=True)
    loads = page.evaluate("performance.getEntriesByType('navigation').length")

    queue = context.new_page()
    queue.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    queue.goto(f"{live_server.url}/jobs/")
    row = f'[data-live-section="job-{waiting.pk}-row"]'
    assert queue.locator(f"{row} .queue-pos").count() == 1
    queue.check(f'{row} input[name="ids"]')  # a ticked box survives its row's update

    # The blocker is cancelled from its own page, in another tab, with a reason.
    other_tab = context.new_page()
    other_tab.goto(f"{live_server.url}/jobs/{blocker.pk}/")
    other_tab.click("details.confirm summary")
    other_tab.fill("#cancel-reason", "make room for waiting")
    with other_tab.expect_navigation():
        other_tab.click("details.confirm button[type=submit]")
    assert other_tab.get_attribute(f'[data-live-key="job-{blocker.pk}-state"]', "data-value") == "cancelled"

    # Before any cycle: the ETA no longer names the cancelled job (the other one holds cards now).
    page.wait_for_selector(eta_link, state="detached", timeout=JOB_PAGE_WAIT_MS)
    assert page.locator(f"{why} #why-eta a[href='/jobs/{other.pk}/']").count() == 1

    # The cluster confirms the pods are gone; one scheduling cycle places the waiting job.
    release(blocker)
    result = scheduling_cycle_run()
    assert waiting.pk in result.placed_job_ids, result.as_dict()
    assert push_job_run(job_id=waiting.pk)["failed"] == 0  # what the push queue's worker does
    page.wait_for_selector(f"{why} #why-this-card", timeout=JOB_PAGE_WAIT_MS)
    page.wait_for_function(
        "s => document.querySelectorAll(s).length === 4",
        arg=f"{allocations} .badge--ok",
        timeout=JOB_PAGE_WAIT_MS,
    )
    page.wait_for_selector(f'{timeline} .badge[data-value="scheduled"]', timeout=JOB_PAGE_WAIT_MS)
    assert page.locator(f"{why} #why-pending").count() == 0
    badge = f'[data-live-key="job-{waiting.pk}-state"]'
    assert page.get_attribute(badge, "data-value") == "scheduled"
    # The pods panel is asked again once the timeline changed: the pushed job's pod is listed.
    page.wait_for_selector("#job-pod #job-pods", timeout=JOB_PAGE_WAIT_MS)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads  # no reload
    page.screenshot(path=str(screenshots / "live-sections-placed.en.png"), full_page=True)

    queue.wait_for_selector(f"{row} .badge[data-value='scheduled']", timeout=LIST_WAIT_MS)
    assert queue.locator(f"{row} .queue-pos").count() == 0
    assert queue.is_checked(f'{row} input[name="ids"]')
    queue.screenshot(path=str(screenshots / "live-sections-list.en.png"))

    # The same page in Chinese renders its sections from the same partials.
    switch_language(page, "zh-hans")
    page.goto(f"{live_server.url}/jobs/{waiting.pk}/")
    assert page.locator(f"{why} #why-this-card").count() == 1
    assert "为什么" in page.inner_text(why)
    page.wait_for_function(
        "s => document.querySelector(s).hasAttribute('data-live-updated')",
        arg=f'[data-live-url][data-live-ids="{waiting.pk}"]',
        timeout=JOB_PAGE_WAIT_MS,
    )
    page.screenshot(path=str(screenshots / "live-sections-placed.zh-hans.png"), full_page=True)

    violations = page.evaluate("window.__cspViolations") + queue.evaluate("window.__cspViolations")
    context.close()
    assert not violations, violations
    assert not errors, errors


@pytest.mark.integration
def test_the_fleet_page_follows_a_cards_health_without_a_reload(
    browser, live_server, transactional_db, fleet, make_user, screenshots
):
    from apps.inventory.models import Device

    admin = make_user("platform-admin", staff=True, password=PASSWORD)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(CSP_LISTENER)
    errors: list[str] = []
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    login(page, live_server.url, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/")
    models = '[data-live-section="fleet-models"]'
    assert page.locator(f"{models} td.text-warn").count() == 0
    loads = page.evaluate("performance.getEntriesByType('navigation').length")
    card = Device.objects.filter(node__name="gpu-01").order_by("index").first()
    Device.objects.filter(pk=card.pk).update(health=Device.Health.DEGRADED)
    page.wait_for_selector(f"{models} td.text-warn", timeout=LIST_WAIT_MS)  # polled every 5 s
    assert page.inner_text('[data-live-key="fleet-degraded"]').strip() == "1"
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads
    page.screenshot(path=str(screenshots / "live-sections-fleet.en.png"), full_page=True)
    violations = page.evaluate("window.__cspViolations")
    context.close()
    assert not violations, violations
    assert not errors, errors


@pytest.mark.integration
def test_a_batch_page_and_the_batch_list_follow_a_soak_start(
    browser, live_server, transactional_db, fleet, make_user, screenshots
):
    from decimal import Decimal

    from apps.rollout import services

    admin = make_user("platform-admin", staff=True, password=PASSWORD)
    criteria = services.soak_criteria_create(
        actor="test",
        name="driver soak",
        min_days=1,
        max_error_events=0,
        max_temperature_c=Decimal("85"),
        max_throughput_drop_pct=Decimal("5"),
        max_lost_devices=0,
        min_telemetry_coverage_pct=Decimal("90"),
    )
    batch = services.batch_create(
        actor="ops",
        name="fw canary",
        slug="fw-canary",
        kind="firmware",
        target_version="9",
        criteria=criteria,
        nodes=[fleet["gpu-02"]],
    )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(CSP_LISTENER)
    errors: list[str] = []
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    login(page, live_server.url, admin.username, PASSWORD)
    listing = context.new_page()
    listing.goto(f"{live_server.url}/rollout/")
    page.goto(f"{live_server.url}/rollout/batches/{batch.pk}/")
    history = f'[data-live-section="batch-{batch.pk}-history"]'
    assert "soak from the page" not in page.inner_text(history)
    # A reason typed into a stage change's form is not lost to an update elsewhere on the page.
    page.fill("#reason-start_soak", "half typed")
    loads = page.evaluate("performance.getEntriesByType('navigation').length")

    services.batch_soak_start(batch=batch, actor=admin, reason="soak from the page")
    page.wait_for_function(
        "([s, t]) => document.querySelector(s).textContent.includes(t)",
        arg=[history, "soak from the page"],
        timeout=LIST_WAIT_MS,
    )
    assert page.get_attribute(f'[data-live-key="batch-{batch.pk}-stage"]', "data-value") == "soaking"
    assert page.input_value("#reason-start_soak") == "half typed"  # typed text holds its section
    page.fill("#reason-start_soak", "")  # given up, and the focus moved on:
    page.locator("#reason-start_soak").blur()  # the stage changes on offer follow the stage
    page.wait_for_selector("#reason-start_soak", state="detached", timeout=LIST_WAIT_MS)
    assert page.locator('[data-batch-action="evaluate"]').count() == 1
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads
    page.screenshot(path=str(screenshots / "live-sections-batch.en.png"), full_page=True)
    listing.wait_for_selector(
        f'[data-live-section="batch-{batch.pk}-row"] .badge[data-value="soaking"]', timeout=LIST_WAIT_MS
    )
    violations = page.evaluate("window.__cspViolations") + listing.evaluate("window.__cspViolations")
    context.close()
    assert not violations, violations
    assert not errors, errors
