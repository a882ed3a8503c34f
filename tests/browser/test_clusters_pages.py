"""Issue 29 §4 in Chromium: staff reach the cluster pages from the main navigation, the pages and the
form are styled like the rest, a TLS failure reads as words with its raw text folded away, and a
member gets the styled 403. Screenshots of the list, the form and a cluster in both languages."""

from __future__ import annotations

import pytest

from tests.browser.conftest import PASSWORD, login, switch_language
from tests.browser.test_pages import CSP_LISTENER

# A stored "Test connection" answer as apps.clusters.connect writes it for a self-signed API server
# (the shape and the raw text are what tests/clusters/test_pages.py observes against a real TLS server).
TLS_CHECK = {
    "ok": False,
    "server_version": "",
    "verbs": {},
    "plugins": [],
    "device_classes": [],
    "problems": [],
    "tls": {
        "kind": "self_signed",
        "verify_code": 18,
        "reason": "self-signed certificate",
        "server": "https://10.0.0.10:6443",
        "detail": "get /version: 0 SSLError\n[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
        "self-signed certificate (_ssl.c:1000)",
    },
}


@pytest.mark.integration
def test_the_cluster_pages_in_both_languages(browser, live_server, transactional_db, screenshots):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.inventory.models import Cluster

    users = get_user_model().objects
    users.create_user("platform-admin", password=PASSWORD, is_staff=True)
    users.create_user("member", password=PASSWORD)
    Cluster.objects.create(name="sim", slug="sim", backend="simulated")
    Cluster.objects.create(
        name="prod-gpu",
        slug="prod-gpu",
        backend="kubernetes",
        kubeconfig_path="/var/lib/suanchi/secrets/kubeconfig-prod-gpu.yaml",
        last_checked_at=timezone.now(),
        last_check=TLS_CHECK,
    )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    login(page, live_server.url, "platform-admin", PASSWORD)
    for language in ("en", "zh-hans"):
        if language != "en":
            switch_language(page, language)
        page.goto(f"{live_server.url}/jobs/")
        link = page.locator(".mainnav a[data-nav=clusters]")
        assert link.is_visible()
        assert link.inner_text() == {"en": "Clusters", "zh-hans": "集群"}[language]
        with page.expect_navigation():
            link.click()
        assert page.url.endswith("/clusters/")
        assert link.get_attribute("aria-current") == "page"
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(screenshots / f"clusters-list.{language}.png"), full_page=True)
        assert page.locator("table.table tbody tr").count() == 2

        page.goto(f"{live_server.url}/clusters/new/")
        page.wait_for_load_state("networkidle")
        # The form's inputs are the editors' (catalog.css): full width, the theme's border.
        width = page.evaluate("document.querySelector('#id_name').getBoundingClientRect().width")
        form_width = page.evaluate("document.querySelector('#cluster-form').getBoundingClientRect().width")
        assert width >= form_width * 0.9, (width, form_width)
        assert page.locator("#cluster-form .field").count() >= 8
        page.screenshot(path=str(screenshots / f"clusters-new.{language}.png"), full_page=True)

        page.goto(f"{live_server.url}/clusters/prod-gpu/")
        page.wait_for_load_state("networkidle")
        alert = page.locator("#tls-failure")
        assert alert.is_visible()
        assert "CERTIFICATE_VERIFY_FAILED" not in alert.inner_text()
        assert not page.locator("#tls-detail pre").is_visible()  # folded away
        page.locator("#tls-detail summary").click()
        assert "CERTIFICATE_VERIFY_FAILED" in page.locator("#tls-detail pre").inner_text()
        page.screenshot(path=str(screenshots / f"clusters-detail-tls.{language}.png"), full_page=True)
        assert page.evaluate("window.__cspViolations") == []

    member = browser.new_context(viewport={"width": 1280, "height": 900})
    member_page = member.new_page()
    login(member_page, live_server.url, "member", PASSWORD)
    assert member_page.locator(".mainnav a[data-nav=clusters]").count() == 0
    response = member_page.goto(f"{live_server.url}/clusters/")
    assert response.status == 403
    assert member_page.locator(".topbar").is_visible()  # the styled page, not Django admin's login
    assert member_page.locator("#id_username").count() == 0
    member_page.screenshot(path=str(screenshots / "clusters-member-403.en.png"), full_page=True)
    member.close()
    context.close()
    # A 403 answer is logged by Chromium as a failed resource load: only the staff pages count here.
    assert not errors, errors
