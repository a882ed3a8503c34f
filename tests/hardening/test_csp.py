"""Content-Security-Policy (issue 15, finding 13): the header, and pages that need no inline exception.

The browser check (no violation logged while walking the main pages) is in tests/browser/test_pages.py;
these run without a browser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest
from django.conf import settings

from apps.inventory.charts import figure_html

pytestmark = pytest.mark.django_db
ROOT = Path(settings.BASE_DIR)

# An executable inline script: a <script> without src whose type is not a JSON data block.
_SCRIPT_TAG = re.compile(r"<script\b([^>]*)>", re.IGNORECASE)
_STYLE_ATTR = re.compile(r"\sstyle\s*=", re.IGNORECASE)
_HANDLER_ATTR = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)


def _inline_problems(html: str) -> list[str]:
    problems = []
    for match in _SCRIPT_TAG.finditer(html):
        attrs = match.group(1)
        if "src=" not in attrs and 'type="application/json"' not in attrs:
            problems.append(match.group(0))
    problems += [m.group(0) for m in _STYLE_ATTR.finditer(html)]
    problems += [m.group(0) for m in _HANDLER_ATTR.finditer(html)]
    problems += ["<style>" for _ in re.finditer(r"<style\b", html, re.IGNORECASE)]
    return problems


def test_every_response_carries_a_policy_without_inline_exceptions(client, make_user):
    client.force_login(make_user())
    for path in ("/accounts/login/", "/inventory/", "/api/accounts/me/"):
        policy = client.get(path, follow=True)["Content-Security-Policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["script-src"] == "'self'"
        # 'self' and two hashes: the empty string (plotly.js's <style>, filled via the CSSOM) and the
        # MapLibre stylesheet the plotly.js bundle inlines; no other inline style can match them.
        sources = directives["style-src"].split()
        assert sources[0] == "'self'" and all(src.startswith("'sha256-") for src in sources[1:])
        assert len(sources) == 3
        assert directives["object-src"] == "'none'"
        assert directives["frame-ancestors"] == "'none'"
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_no_template_carries_an_inline_script_style_or_handler():
    templates = sorted((ROOT / "templates").rglob("*.html")) + sorted(
        (ROOT / "apps").glob("*/templates/**/*.html")
    )
    assert len(templates) > 30
    found = {}
    for path in templates:
        text = re.sub(r"{% comment %}.*?{% endcomment %}", "", path.read_text(), flags=re.DOTALL)
        problems = _inline_problems(text)
        if problems:
            found[str(path.relative_to(ROOT))] = problems
    assert not found, found


def test_a_chart_is_an_empty_div_and_a_json_data_block_that_cannot_close_itself():
    fig = go.Figure(go.Bar(x=["</script><script>alert(1)</script>"], y=[1]))
    html = figure_html(fig, div_id="c1")
    assert not _inline_problems(html)
    assert html.startswith('<div id="c1" class="plotly-graph-div" data-plotly-chart></div>')
    assert html.count("</script>") == 1 and "<script>alert" not in html
    block = re.search(r'<script type="application/json" data-plotly-figure="c1">(.*)</script>', html).group(1)
    spec = json.loads(block)
    assert spec["figure"]["data"][0]["x"] == ["</script><script>alert(1)</script>"]
    assert spec["config"]["displaylogo"] is False


def test_the_api_docs_page_loads_its_script_from_a_url(client, make_user):
    client.force_login(make_user())
    page = client.get("/api/docs/")
    assert page.status_code == 200
    assert not _inline_problems(page.content.decode())
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()


def test_the_style_hashes_match_the_installed_plotly_bundle():
    """The one non-empty inline <style> plotly.js writes (MapLibre's CSS) is the text whose hash we allow."""
    import base64
    import hashlib

    bundle = (Path(settings.BASE_DIR) / "static" / settings.SUANCHI_PLOTLY_JS).read_text(encoding="utf-8")
    inlined = re.findall(r'createElement\("style"\);e\.id="[0-9a-f]+",e\.textContent=`([^`$\\\\]*)`', bundle)
    assert len(inlined) == 1
    allowed = settings.SUANCHI_CONTENT_SECURITY_POLICY["style-src"]
    for text in ("", inlined[0]):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in allowed
