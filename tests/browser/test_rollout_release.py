"""Issue 29 §3 in Chromium: platform staff create a gray batch in the app (searching the fleet in the
node picker and ticking a node), start its soak, and admit it once the soak passed, each with a
reason, in English and in Chinese; the soak chart stays inside its card. No console error and no
Content-Security-Policy violation on the way. Screenshots: ``rollout-create.<lang>.png``,
``rollout-admitted.<lang>.png``."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import PASSWORD, login, switch_language
from tests.browser.test_pages import CSP_LISTENER

# Bottom of the soak chart's legend and plot, and top of the card after the chart's card.
CHART_GEOMETRY = """() => {
  const chart = document.getElementById('soak-evidence');
  const svg = chart.querySelector('.main-svg');
  const legend = chart.querySelector('.legend');
  const card = chart.closest('.panel');
  const next = card.nextElementSibling;
  return {
    chart: chart.getBoundingClientRect().bottom,
    svg: svg.getBoundingClientRect().bottom,
    legendTop: legend.getBoundingClientRect().top,
    legendBottom: legend.getBoundingClientRect().bottom,
    chartTop: chart.getBoundingClientRect().top,
    card: card.getBoundingClientRect().bottom,
    next: next ? next.getBoundingClientRect().top : null,
    points: chart.querySelectorAll('.scatterlayer .trace:first-child .point').length,
  };
}"""


@pytest.mark.integration
def test_staff_create_and_admit_a_batch_in_both_languages(
    browser, live_server, transactional_db, fleet, screenshots
):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.core.models import ChangeRecord
    from apps.rollout import services
    from apps.rollout.models import GrayBatch
    from tests.fixtures.rollout import ingest_soak

    get_user_model().objects.create_user("release-admin", password=PASSWORD, is_staff=True)
    criteria = services.soak_criteria_create(
        actor="test",
        name="agents: 1 day",
        min_days=1,
        max_throughput_drop_pct=None,
        max_temperature_c=Decimal("85"),
    )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    login(page, live_server.url, "release-admin", PASSWORD)

    for language, node_name in (("en", "gpu-01"), ("zh-hans", "gpu-02")):
        if language != "en":
            switch_language(page, language)
        assert page.get_attribute("html", "lang") == language
        name = f"dcgm canary {language}"
        page.goto(f"{live_server.url}/rollout/batches/new/")
        page.fill("#id_name", name)
        page.select_option("#id_kind", "collector")
        page.fill("#id_target_version", "3.3.9")
        page.select_option("#id_criteria", str(criteria.pk))
        # the picker searches on the server and shows one page of matches
        page.fill("#picker-q", node_name)
        expect(page.locator("#picker-results tbody tr")).to_have_count(1)
        assert page.locator("#picker-results tbody tr").first.inner_text().split()[0] == node_name
        page.check(f'#picker-results tbody tr:has-text("{node_name}") input[type=checkbox]')
        assert page.locator("#picked-nodes [data-node-id]").count() == 1
        page.fill("#id_reason", f"new collector ({language})")
        page.screenshot(path=str(screenshots / f"rollout-create.{language}.png"), full_page=True)
        with page.expect_navigation():
            page.click("[data-create-batch]")
        batch = GrayBatch.objects.get(name=name)
        assert page.url.endswith(f"/rollout/batches/{batch.pk}/")
        assert batch.created_by.username == "release-admin"
        assert list(batch.nodes.values_list("name", flat=True)) == [node_name]

        page.fill("#reason-start_soak", "soak on one node")
        with page.expect_navigation():
            page.click('[data-batch-action="start_soak"] button')
        batch.refresh_from_db()
        assert batch.stage == GrayBatch.Stage.SOAKING

        # A day of clean telemetry arrives (as from the exporter); staff evaluate, then admit.
        start = timezone.now() - timedelta(hours=25)
        GrayBatch.objects.filter(pk=batch.pk).update(soak_started_at=start)
        ingest_soak(list(batch.nodes.all()), start=start, end=timezone.now() - timedelta(minutes=2))
        page.reload()
        page.fill("#reason-evaluate", "a day is up")
        with page.expect_navigation():
            page.click('[data-batch-action="evaluate"] button')
        batch.refresh_from_db()
        assert batch.stage == GrayBatch.Stage.PASSED
        page.fill("#reason-admit", "clean for 25 h")
        with page.expect_navigation():
            page.click('[data-batch-action="admit"] button')
        page.wait_for_load_state("networkidle")
        batch.refresh_from_db()
        assert batch.stage == GrayBatch.Stage.ADMITTED
        assert page.get_attribute(f'[data-live-key="batch-{batch.pk}-stage"]', "data-value") == "admitted"
        assert page.locator('#batch-history [data-audit-action="graybatch.admitted"]').count() == 1
        messages = set(
            ChangeRecord.objects.filter(object_id=str(batch.pk), action__startswith="graybatch.").values_list(
                "message", flat=True
            )
        )
        assert {
            f"new collector ({language})",
            "soak on one node",
            "a day is up",
            "clean for 25 h",
        } <= messages

        # the soak chart: a point per hour, the legend inside the chart, the chart inside its card
        page.wait_for_selector("#soak-evidence .main-svg")
        geometry = page.evaluate(CHART_GEOMETRY)
        assert geometry["points"] >= 24, geometry
        assert geometry["svg"] <= geometry["chart"] + 1, geometry
        assert geometry["legendTop"] >= geometry["chartTop"] - 1, geometry
        assert geometry["chart"] <= geometry["card"], geometry
        assert geometry["next"] is None or geometry["card"] <= geometry["next"], geometry
        page.screenshot(path=str(screenshots / f"rollout-admitted.{language}.png"), full_page=True)
        assert (screenshots / f"rollout-admitted.{language}.png").stat().st_size > 10_000
        assert page.evaluate("window.__cspViolations") == []
    context.close()
    assert errors == [], errors
