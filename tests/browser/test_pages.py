"""Every page renders for an admin, a project member and an outsider — the right content, no server
error — and a member sees nothing of another project anywhere in the UI. Then a screenshot of each
main page in a real browser, in English and in Chinese."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver

from apps.accounts.models import Project
from tests.browser.conftest import login, switch_language

# Pages whose GET changes something or is not a page: never walked blindly.
# "favicon": a redirect to the static icon (tests/core/test_http_basics.py), not a page.
SKIP_NAMES = {"logout", "set_language", "healthz", "api-schema", "favicon"}
SKIP_PREFIXES = ("admin/", "api/", "i18n/", "static/")
# Projects alice (vision admin, llm-train member) is not in: their names must never reach her pages.
FOREIGN = ("Online inference 在线推理", "BI analytics 数据分析", "online-inference", "bi-analytics")


def simple_pages() -> list[str]:
    """Every URL of the page URLconf that takes no argument."""
    out = []

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                if p.name in SKIP_NAMES or route.startswith(SKIP_PREFIXES) or "<" in route:
                    continue
                if "download" in route or "export" in route:
                    continue
                out.append("/" + route.lstrip("^").rstrip("$"))

    walk(get_resolver().url_patterns)
    return sorted(set(out))


def detail_pages() -> list[str]:
    """Detail pages of demo objects (one of each kind)."""
    from apps.billing.models import Bill
    from apps.catalog.models import ComputeTemplate, DeviceRequestTemplate
    from apps.inventory.models import Device, Node
    from apps.jobs.models import Job

    pages = []
    job = Job.objects.filter(project__slug="vision").order_by("pk").first()
    foreign_job = Job.objects.filter(project__slug="online-inference").order_by("pk").first()
    for obj, url in (
        (Node.objects.order_by("pk").first(), "/inventory/nodes/{pk}/"),
        (Device.objects.order_by("pk").first(), "/inventory/devices/{pk}/"),
        (ComputeTemplate.objects.order_by("pk").first(), "/catalog/templates/{pk}/"),
        (DeviceRequestTemplate.objects.order_by("pk").first(), "/catalog/request-templates/{pk}/"),
        (job, "/jobs/{pk}/"),
        (foreign_job, "/jobs/{pk}/"),
        (Bill.objects.filter(project__slug="vision").first(), "/billing/bills/{pk}/"),
        (Bill.objects.filter(project__slug="online-inference").first(), "/billing/bills/{pk}/"),
    ):
        if obj is not None:
            pages.append(url.format(pk=obj.pk))
    return pages


@pytest.fixture
def demo_db(db, capsys):
    call_command("load_demo")
    capsys.readouterr()
    User = get_user_model()
    User.objects.create_user("dave", password="outsider-pass-1")  # no project at all


def walk(client, username: str) -> dict[str, tuple[int, str]]:
    client.force_login(get_user_model().objects.get(username=username))
    answers = {}
    for url in simple_pages() + detail_pages():
        response = client.get(url)
        body = response.content.decode("utf-8", "replace") if response.status_code == 200 else ""
        answers[url] = (response.status_code, body)
    return answers


def test_every_page_answers_each_kind_of_user_without_a_server_error(client, demo_db):
    pages = simple_pages()
    assert len(pages) >= 20, pages
    for username in ("admin", "alice", "dave"):
        answers = walk(client, username)
        errors = {url: code for url, (code, _body) in answers.items() if code >= 500}
        assert not errors, (username, errors)
        # 405: a POST-only endpoint (month close, the submit preview) refusing a GET.
        unexpected = {
            url: code for url, (code, _b) in answers.items() if code not in (200, 302, 403, 404, 405)
        }
        assert not unexpected, (username, unexpected)

    admin = walk(client, "admin")
    # Staff see every page ("/" and "/catalog/" redirect to their landing pages).
    assert all(code in (200, 302, 405) for code, _b in admin.values())
    # The only non-200 answers: the two landing redirects and POST-only endpoints refusing a GET.
    not_ok = {url: code for url, (code, _b) in admin.items() if code != 200}
    assert all(code in (302, 405) for code in not_ok.values()), not_ok
    assert sum(code == 302 for code in not_ok.values()) <= 3, not_ok
    assert sum(code == 200 for code, _b in admin.values()) >= len(admin) - 8, not_ok
    assert "Online inference 在线推理" in admin["/jobs/"][1]  # staff see every project


def test_a_member_sees_nothing_of_another_project(client, demo_db):
    answers = walk(client, "alice")
    leaks = {
        url: [name for name in FOREIGN if name in body] for url, (_code, body) in answers.items() if body
    }
    leaks = {url: names for url, names in leaks.items() if names}
    assert not leaks, leaks
    assert "Vision 视觉" in answers["/jobs/"][1]
    # Another project's job and bill are not found (not forbidden: no information leaks).
    foreign = [u for u in detail_pages() if u not in simple_pages()]
    for url in foreign:
        code, body = answers[url]
        assert code in (200, 404)
    outsider = walk(client, "dave")
    for url, (code, body) in outsider.items():
        if code == 200:
            assert not any(p.name in body for p in Project.objects.all()), url


@pytest.mark.integration
def test_screenshots_of_the_main_pages_in_both_languages(browser, live_server, demo, screenshots):
    main = [
        "/",
        "/inventory/",
        "/inventory/nodes/",
        "/inventory/devices/",
        "/catalog/templates/",
        "/jobs/",
        "/jobs/submit/",
        "/jobs/runbook/",
        "/quotas/",
        "/quotas/board/",
        "/telemetry/",
        "/rollout/",
        "/migration/",
        "/billing/",
        "/billing/console/",
        # issue 29's new pages
        "/catalog/library/",
        "/clusters/",
        "/inventory/events/",
        "/notifications/alerts/",
        "/rollout/batches/new/",
    ]
    for language in ("en", "zh-hans"):
        context = browser.new_context(viewport={"width": 1440, "height": 900}, locale=language)
        page = context.new_page()
        login(page, live_server.url, "admin", "suanchi-admin")
        if language != "en":
            switch_language(page, language)
        for url in main:
            response = page.goto(live_server.url + url)
            assert response.status < 500, (url, response.status)
            page.wait_for_load_state("networkidle")
            name = (url.strip("/").replace("/", "-") or "home") + f".{language}.png"
            page.screenshot(path=str(screenshots / name), full_page=True)
            assert (screenshots / name).stat().st_size > 10_000
        context.close()


# Collects every Content-Security-Policy violation the page reports (W3C CSP3 §5.3: the
# "securitypolicyviolation" event), from before the page's own scripts run.
CSP_LISTENER = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI + " " + e.sourceFile + ":" + e.lineNumber);
});
"""


@pytest.mark.integration
def test_the_main_pages_log_no_content_security_policy_violation(browser, live_server, demo):
    from apps.inventory.models import Device, Node
    from apps.jobs.models import Job
    from apps.migration.models import MigratedService

    pages = [
        "/inventory/",
        "/inventory/nodes/",
        "/inventory/devices/",
        f"/inventory/nodes/{Node.objects.order_by('pk').first().pk}/",
        "/catalog/templates/",
        "/catalog/templates/new/",
        "/jobs/",
        "/jobs/submit/",
        f"/jobs/{Job.objects.order_by('pk').first().pk}/",
        "/quotas/",
        "/quotas/board/",
        "/telemetry/",
        "/rollout/",
        "/migration/",
        "/billing/",
        "/billing/console/",
        "/clusters/",
        "/clusters/new/",
        "/catalog/library/",
        "/inventory/events/",
        f"/inventory/devices/{Device.objects.order_by('pk').first().pk}/",
        "/notifications/alerts/",
        "/rollout/batches/new/",
        "/api/docs/",
        "/admin/",
    ]
    service = MigratedService.objects.order_by("pk").first()
    if service is not None:
        pages.append(f"/migration/services/{service.pk}/")
    violations, console, errors = {}, [], []
    for language in ("en", "zh-hans"):  # issue 29: every page in both languages
        _walk_for_violations(browser, live_server, pages, language, violations, console, errors)
    assert not violations, violations
    assert not console, console
    assert not errors, errors  # no console error at all


def _walk_for_violations(browser, live_server, pages, language, violations, console, errors):
    """Open every page of ``pages`` as staff in ``language``; collect CSP violations and console errors."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale=language)
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    page.on(
        "console",
        lambda m: (
            console.append(m.text) if "Refused to" in m.text or "Content Security Policy" in m.text else None
        ),
    )
    page.on(
        "console", lambda m: errors.append(f"{language} {page.url}: {m.text}") if m.type == "error" else None
    )
    login(page, live_server.url, "admin", "suanchi-admin")
    if language != "en":
        switch_language(page, language)
    for url in pages:
        response = page.goto(live_server.url + url)
        assert response.status < 400, (url, response.status)
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        found = page.evaluate("window.__cspViolations")
        if found:
            violations[f"{language} {url}"] = found
        if url == "/inventory/":  # the fleet chart was drawn by static/js/charts.js
            assert page.locator("#fleet-cards-chart .main-svg").count() >= 1
        if url == "/jobs/submit/":  # translated strings reached the form's script
            # every data-* text of the page's hidden element, none lost (data-page-text names it)
            expected = page.evaluate(
                "[...document.querySelector('[data-page-text=SUANCHI_JOBS_TEXT]').attributes]"
                ".filter(a => a.name.startsWith('data-') && a.name !== 'data-page-text').length"
            )
            assert expected >= 26
            assert page.evaluate("Object.keys(window.SUANCHI_JOBS_TEXT || {}).length") == expected
    context.close()
