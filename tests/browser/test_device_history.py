"""Issue 29 §5 in Chromium: a card's page draws its metric history (utilization, memory, temperature,
power, error counters) in English and Chinese, refreshes it in place, and reads its events as
"field: old → new" lines — with 0 console errors and 0 CSP violations."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.conftest import PASSWORD, login, switch_language


def _rollups(device, hours: int = 3) -> None:
    from apps.telemetry.models import DeviceRollup

    now = timezone.now()
    start = now - timedelta(hours=hours)
    at = start.replace(minute=start.minute // 5 * 5, second=0, microsecond=0)
    i = 0
    while at < now - timedelta(minutes=5):
        DeviceRollup.objects.create(
            device=device,
            resolution=300,
            window_start=at,
            source="prometheus:prod/main",
            first_sample_at=at,
            last_sample_at=at + timedelta(seconds=299),
            sample_count=10,
            util_sum=10 * (40 + i % 30),
            util_n=10,
            mem_used_sum=10 * 20480.0,
            mem_used_n=10,
            mem_total_mib=81920,
            temp_max_c=55 + i % 10,
            power_sum=10 * 250.0,
            power_n=10,
            error_deltas={"ecc_sbe": float(i % 3 == 0), "ecc_dbe": 0.0},
        )
        at += timedelta(minutes=5)
        i += 1


@pytest.mark.integration
def test_device_history_in_both_languages(browser, live_server, fleet, staff_user, screenshots, monkeypatch):
    from apps.inventory.models import Device
    from apps.inventory.services import ledger
    from apps.telemetry import history

    monkeypatch.setattr(history, "REFRESH_S", 10)
    device = Device.objects.filter(node__name="gpu-01").order_by("index").first()
    _rollups(device)
    ledger.device_pool_status_set(device=device, pool_status=Device.PoolStatus.GRAY, actor=staff_user)
    staff_user.set_password(PASSWORD)
    staff_user.save()

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, live_server.url, staff_user.username, PASSWORD)
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "{ (window.__csp = window.__csp || []).push(e.violatedDirective + ' ' + e.blockedURI); });"
    )

    for language, title, change in (
        ("en", "Card busy (%)", "Pool status"),
        ("zh-hans", "卡忙碌率（%）", "入池状态"),
    ):
        if language != "en":
            switch_language(page, language)
        page.goto(f"{live_server.url}/inventory/devices/{device.pk}/?range=24h")
        for metric in ("utilization", "memory", "temperature", "power", "errors"):
            page.wait_for_selector(f"#history-device-{metric}-chart .main-svg")
        drawn = page.evaluate(
            """() => { const g = document.getElementById('history-device-utilization-chart');
                       return {points: g.data[0].x.length, title: g._fullLayout.yaxis.title.text}; }"""
        )
        assert drawn["points"] >= 30 and drawn["title"] == title
        assert change in page.inner_text("[data-event-changes]")
        # Auto-refresh: the panel reloads its chart JSON in place.
        page.wait_for_selector("[data-history-updated]", state="attached", timeout=30_000)
        page.screenshot(path=str(screenshots / f"device-history.{language}.png"), full_page=True)
        # A bad custom range: the page says why (400), never a server error.
        response = page.goto(f"{live_server.url}/inventory/devices/{device.pk}/?range=custom&from=x&to=y")
        assert response.status == 400
        assert page.is_visible("[data-history-error]")
        # The fleet's events, grouped per node, filtered and paged on their own page.
        page.goto(f"{live_server.url}/inventory/events/?group=node")
        assert page.locator("[data-event-group]").count() >= 1
        page.screenshot(path=str(screenshots / f"fleet-events.{language}.png"), full_page=True)

    # The node's page: one line per card it holds.
    page.goto(f"{live_server.url}/inventory/nodes/{device.node_id}/")
    page.wait_for_selector("#history-node-utilization-chart .main-svg")
    names = page.evaluate(
        "() => document.getElementById('history-node-utilization-chart').data.map(t => t.name)"
    )
    assert names == ["GPU0"]
    page.screenshot(path=str(screenshots / "node-history.zh-hans.png"), full_page=True)
    csp = page.evaluate("() => window.__csp || []")
    assert csp == []
    # The 400 page's own "Failed to load resource" console line is the only expected error.
    assert [e for e in errors if "400" not in e] == [], errors
    context.close()
