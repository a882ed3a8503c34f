"""The user journey in a real browser: log in, submit a job through the form, watch it scheduled on
the simulated cluster, open its trace, switch to Chinese, download a bill; screenshots of each main
page."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from apps.accounts.models import Project
from apps.billing.models import Bill
from apps.catalog.models import DeviceModel
from apps.jobs.models import Job, JobState
from tests.browser.conftest import login, switch_language

pytestmark = pytest.mark.integration


def test_submit_watch_trace_switch_language_download_a_bill(browser, live_server, demo, worker, screenshots):
    context = browser.new_context(accept_downloads=True, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    base = live_server.url
    login(page, base, "alice", "suanchi-demo")
    assert page.url.rstrip("/") == base or "/accounts/login" not in page.url

    # Submit whole A100 cards through the form.
    page.goto(f"{base}/jobs/submit/")
    vision = Project.objects.get(slug="vision")
    a100 = DeviceModel.objects.get(name="A100 80GB SXM4")
    page.select_option("select[name=project]", value=str(vision.pk))
    page.fill("input[name=name]", "browser-train")
    page.fill("input[name=image]", "registry.local/pytorch:2.3")
    page.check("input[name=request_kind][value=whole_cards]")
    page.select_option("select[name=device_model]", value=str(a100.pk))
    page.fill("input[name=count]", "1")
    page.screenshot(path=str(screenshots / "job-submit.png"), full_page=True)
    page.click("#job-submit-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    errors = page.locator(".field-error").all_inner_texts()
    assert not errors, (page.url, errors)
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    job = Job.objects.get(name="browser-train")

    # The worker schedules it; the page shows the state (bounded wait, reloading).
    for _ in range(40):
        state = page.get_attribute("h1 .badge", "data-value")
        if state in (JobState.SCHEDULED, JobState.RUNNING):
            break
        page.wait_for_timeout(500)
        page.reload()
    assert page.get_attribute("h1 .badge", "data-value") in (JobState.SCHEDULED, JobState.RUNNING)
    job.refresh_from_db()
    assert job.allocations.filter(released_at__isnull=True).count() == 1

    # The trace: why this card.
    assert page.locator("text=Why this card?").is_visible()
    assert str(job.last_trace_id) in page.content()
    page.screenshot(path=str(screenshots / "job-detail.png"), full_page=True)

    # Switch to Chinese with the language switcher.
    switch_language(page, "zh-hans")
    assert page.evaluate("document.documentElement.lang") == "zh-hans"
    assert "作业" in page.inner_text("nav")

    # Download a bill of the closed demo month.
    bill = Bill.objects.filter(project__slug="vision").order_by("-period__month").first()
    assert bill is not None
    page.goto(f"{base}/billing/")
    with page.expect_download() as info:
        page.click(f"a[href$='/{bill.pk}/download/csv/']")
    download = info.value
    text = Path(download.path()).read_text(encoding="utf-8-sig")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and any(str(bill.total) in ",".join(r) for r in rows)
    page.screenshot(path=str(screenshots / "billing.png"), full_page=True)
    context.close()
