"""Issue 21 in a real browser (Chromium): the job page draws a curve per card with plotly (times in
the platform zone, a sane axis for one point), then loads the pods' events and log tail after the page
itself, and fetches the log again while the job runs — without a reload and without a CSP error."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.browser.conftest import PASSWORD, login, submit_whole_card


@pytest.mark.integration
def test_the_job_page_draws_card_curves_and_follows_the_log(
    browser, live_server, transactional_db, fleet, member_project, a100, screenshots
):
    from django.utils import timezone

    from apps.clusters.connections import backend_for
    from apps.clusters.pusher import push_job_run
    from apps.inventory.models import Cluster
    from apps.jobs.models import Allocation
    from apps.scheduling.services import scheduling_cycle_run
    from apps.telemetry.models import DeviceRollup

    user, project = member_project
    job = submit_whole_card(user, project, a100, "observed-train", expected_duration_s=3600)
    scheduling_cycle_run()
    assert push_job_run(job_id=job.pk)["failed"] == 0
    allocation = Allocation.objects.get(job=job)
    Allocation.objects.filter(pk=allocation.pk).update(started_at=timezone.now() - dt.timedelta(minutes=20))
    at = dt.datetime.fromtimestamp(int(timezone.now().timestamp()) // 300 * 300 - 300, tz=dt.UTC)
    DeviceRollup.objects.create(
        device=allocation.device,
        window_start=at,
        source="prometheus:prod/main",
        first_sample_at=at,
        last_sample_at=at + dt.timedelta(seconds=290),
        util_avg=64.0,
        mem_used_avg_mib=20480,
        temp_max_c=58,
    )

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    # CSP refusals and script errors are console errors; failed loads are checked by URL (the
    # browser's own /favicon.ico probe is not the page's).
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    page.on("pageerror", lambda e: errors.append(str(e)))
    login(page, live_server.url, user.username, PASSWORD)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")

    # Curves: drawn by plotly from the JSON block, one point → an axis of an hour around it.
    chart = "#job-card-utilization-chart"
    page.wait_for_selector(f"{chart}[data-plotly-drawn] .main-svg", timeout=10_000)
    span = page.evaluate(
        f"""() => {{ const r = document.querySelector('{chart}')._fullLayout.xaxis.range;
                    return (new Date(r[1]) - new Date(r[0])) / 60000; }}"""
    )
    assert 55 <= span <= 65, span
    title = page.evaluate(f"() => document.querySelector('{chart}')._fullLayout.xaxis.title.text")
    assert "Asia/Shanghai" in title or "UTC" in title or "(" in title
    assert "not reported by dcgm-exporter" in page.inner_text("#job-cards")  # power: no zero line
    assert page.query_selector("#job-card-power-chart") is None

    # Events and log arrive after the page, from the fragment URL.
    page.wait_for_selector("#job-pod-content", timeout=10_000)
    panel = page.inner_text("#job-pod")
    assert "Scheduled" in panel and "simulated" in panel
    first = page.get_attribute("#job-pod", "data-pod-updated")

    backend_for(Cluster.objects.get(slug="prod")).advance(60)  # the container has run a minute
    loads = page.evaluate("performance.getEntriesByType('navigation').length")
    page.wait_for_function(
        f"() => document.querySelector('#job-pod').getAttribute('data-pod-updated') !== {first!r}",
        timeout=20_000,
    )
    page.wait_for_selector("#job-pod-log", timeout=15_000)
    assert "[simulated]" in page.inner_text("#job-pod-log")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads  # no reload
    page.screenshot(path=str(screenshots / "job-observe.png"), full_page=True)
    assert not errors, errors
    context.close()
