"""The progress of a background run in a real browser: static/js/run-progress.js follows the run
(/runs/<id>/) while a worker publishes progress, then reloads the page to show the result. The
pages carry no inline script (the site sends a Content-Security-Policy)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from apps.core import runs
from tests.browser.conftest import login

pytestmark = pytest.mark.integration


def test_a_backfill_page_follows_its_run_and_shows_the_report(browser, live_server, transactional_db):
    admin = get_user_model().objects.create_user(
        "ops", password="ops-pass-For-tests-1", is_staff=True, is_superuser=True
    )
    start = datetime(2026, 9, 1, tzinfo=UTC)
    run = runs.run_create(
        kind="telemetry.backfill",
        actor=admin,
        params={
            "source": 0,
            "source_name": "bj1/prom-gone",
            "start": start.isoformat(),
            "end": start.replace(day=2).isoformat(),
        },
    )
    run = runs.run_start(run_id=run.pk)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        login(page, live_server.url, "ops", "ops-pass-For-tests-1")
        page.goto(f"{live_server.url}/telemetry/backfills/{run.pk}/")
        assert page.locator("script:not([src])").count() == 0  # nothing inline
        box = page.locator("[data-run-progress]")
        assert box.get_attribute("data-status") == "running"

        runs.run_progress(run=run, done=6, total=24)  # the worker, one chunk at a time
        # expect() polls without evaluating strings in the page (its CSP forbids 'unsafe-eval').
        expect(page.locator("[data-run-field=count]")).to_have_text("6/24", timeout=10_000)
        assert page.eval_on_selector("[data-run-field=bar]", "el => el.value") == 25

        runs.run_progress(run=run, done=24)
        runs.run_finish(run=run, result={"used": 7, "windows": 288})
        page.wait_for_selector("pre.mono", timeout=10_000)  # reloaded: the report is on the page
        assert "'windows': 288" in page.inner_text("pre.mono")
        assert box.get_attribute("data-status") == "succeeded"
        assert page.eval_on_selector("[data-run-field=bar]", "el => el.value") == 100
    finally:
        context.close()
