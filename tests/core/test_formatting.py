"""Issue 21 page tests: one number/date format (defect 9), charts and exports in the platform time zone
(defect 1), a login lockout that lasts what its message says and counts only failures (defect 2),
static files hashed, compressed and cacheable (defect 6), styled error pages (defect 8)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import plotly.graph_objects as go
import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.template import Context, Template
from django.test import RequestFactory
from django.utils import translation

from apps.core import throttling
from apps.core.exports import csv_cell, xlsx_value
from apps.core.formatting import format_datetime, format_number, plain_decimal
from apps.inventory.charts import figure_html

T = datetime(2026, 12, 1, 8, 38, tzinfo=UTC)  # 16:38 in Asia/Shanghai


def _figure(html: str) -> dict:
    block = re.search(
        r'<script type="application/json" data-plotly-figure="[^"]+">(.*)</script>', html
    ).group(1)
    return json.loads(block)["figure"]


# ---------------------------------------------------------------------------- defect 9: numbers, dates


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("0.580100000000000"), "0.5801"),
        (Decimal("1E+1"), "10"),
        (Decimal("10.000").normalize(), "10"),
        (Decimal("2.50"), "2.5"),
        (Decimal("-0.000"), "0"),
        (3, "3"),
        (None, ""),
    ],
)
def test_decimals_print_without_exponent_or_trailing_zeros(value, text):
    assert plain_decimal(value) == text


def test_the_num_filter_rounds_and_groups_when_asked():
    assert plain_decimal(Decimal("0.58016"), 3) == "0.58"
    assert format_number(Decimal("12345.5"), grouping=True) == "12,345.5"
    rendered = Template("{% load suanchi %}{{ c|num }} · {{ c|num:2 }}").render(
        Context({"c": Decimal("0.5801000")})
    )
    assert rendered == "0.5801 · 0.58"


def test_one_date_format_in_both_languages_and_the_admin():
    for language in ("en", "zh-hans"):
        with translation.override(language):
            assert format_datetime(T) == "2026-12-01 16:38"
            assert format_datetime(T, short=False) == "2026-12-01 16:38"
            # What the admin and {{ value }} print (DATETIME_FORMAT): no "Dec. 1, 2026, 4:53 p.m.".
            assert Template("{{ t }}").render(Context({"t": T})) == "2026-12-01 16:38"
            assert Template("{% load suanchi %}{{ t|when }}").render(Context({"t": T})) == "2026-12-01 16:38"


@pytest.mark.django_db
def test_a_gate_reads_p99_plus_ten_percent_not_an_exponent():
    from apps.migration.models import Gate

    gate = Gate(kind=Gate.Kind.P99_LATENCY, threshold=Decimal("10.000"), window_days=7)
    assert "p99 + 10 %" in gate.describe()
    assert "E+" not in gate.describe()


@pytest.mark.django_db
def test_a_gate_result_prints_its_threshold_without_an_exponent(dual):
    """Issue 29 §9: the gate's evaluation (threshold, detail) read ``1E+1`` where describe() was fixed."""
    from apps.migration.gates import _accuracy
    from apps.migration.models import Gate

    service, _user, _project = dual
    gate = Gate(kind=Gate.Kind.ACCURACY, threshold=Decimal("10.000"), metric="top1", window_days=7)
    result = _accuracy(gate, service, datetime(2026, 12, 1, tzinfo=UTC))
    assert result.threshold == "10"


def test_no_decimal_is_printed_through_str_of_normalize():
    """``str(Decimal("10").normalize())`` is ``1E+1``: numbers are printed by
    ``apps.core.formatting.plain_decimal`` (or ``f"{x.normalize():f}"``), nowhere else."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "apps"
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in root.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ".normalize()" in line and ".normalize():f}" not in line
    ]
    assert offenders == []


@pytest.mark.django_db
def test_the_close_month_error_prints_the_page_date_format():
    from datetime import date

    from apps.billing import services
    from apps.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as raised:
        services.month_close(month=date(2099, 12, 1), actor="test")
    message = str(raised.value.message if hasattr(raised.value, "message") else raised.value)
    assert "2100-01-01 00:00" in message and "T00:00:00" not in message


# ---------------------------------------------------------------------------- defect 1: time zone


def test_chart_times_are_drawn_in_the_platform_zone_and_say_so():
    fig = go.Figure(go.Scatter(x=[T, T + timedelta(minutes=5)], y=[1, 2]))
    fig.add_trace(go.Scatter(x=[(T + timedelta(minutes=10)).isoformat()], y=[3]))  # selectors' ISO strings
    figure = _figure(figure_html(fig, div_id="c"))
    assert figure["data"][0]["x"] == ["2026-12-01 16:38:00", "2026-12-01 16:43:00"]
    assert figure["data"][1]["x"] == ["2026-12-01 16:48:00"]
    assert figure["layout"]["xaxis"]["title"]["text"] == "Time (Asia/Shanghai)"
    assert "range" not in figure["layout"]["xaxis"]


def test_a_chart_of_one_instant_gets_an_hour_wide_axis():
    figure = _figure(figure_html(go.Figure(go.Scatter(x=[T], y=[1])), div_id="c"))
    assert figure["layout"]["xaxis"]["range"] == ["2026-12-01 16:08:00", "2026-12-01 17:08:00"]


def test_exports_write_times_in_the_platform_zone_with_its_offset():
    assert csv_cell(T) == "2026-12-01 16:38:00+08:00"
    assert csv_cell(T.isoformat()) == "2026-12-01 16:38:00+08:00"
    assert csv_cell("=1+2") == "'=1+2"  # still spreadsheet-safe
    assert xlsx_value(T) == datetime(2026, 12, 1, 16, 38)


def test_gate_provenance_names_the_platform_zone(dual):
    from apps.migration import gates

    service, _user, _project = dual
    text = gates._metric_source(service, T, T + timedelta(days=1))
    assert "2026-12-01 16:38 → 2026-12-02 16:38 Asia/Shanghai" in text and "UTC" not in text


# ---------------------------------------------------------------------------- defect 2: login lockout


@pytest.fixture
def clock(monkeypatch):
    now = {"t": 1_800_000_000.0}
    monkeypatch.setattr(throttling.time, "time", lambda: now["t"])
    return now


@pytest.fixture(params=["redis", "file"])
def any_cache(request, settings, tmp_path):
    if request.param == "file":  # the demo's cache: its incr once rewrote entries with a 300 s timeout
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                "LOCATION": str(tmp_path / "cache"),
            }
        }
    cache.clear()
    yield request.param
    cache.clear()


def _post(client, username, password):
    return client.post("/accounts/login/", {"username": username, "password": password})


@pytest.mark.django_db
def test_the_lockout_lasts_exactly_what_its_message_says(client, clock, any_cache):
    get_user_model().objects.create_user("mallory", password="pw-For-tests-1")
    for _ in range(throttling.LOGIN_ATTEMPTS_PER_MINUTE):
        assert _post(client, "mallory", "wrong").status_code == 200
        clock["t"] += 2  # each attempt later than the first: none of them may extend the window
    blocked = _post(client, "mallory", "wrong")
    assert blocked.status_code == 429
    wait = int(blocked["Retry-After"])
    assert wait == 60 - 2 * throttling.LOGIN_ATTEMPTS_PER_MINUTE
    assert f"Try again in {wait} seconds." in blocked.content.decode()
    assert 'name="username"' in blocked.content.decode()  # the form, in the layout
    clock["t"] += wait - 1
    assert _post(client, "mallory", "wrong").status_code == 429  # still inside the window
    clock["t"] += 1
    assert _post(client, "mallory", "pw-For-tests-1").status_code == 302  # exactly when it said


@pytest.mark.django_db
def test_successful_logins_do_not_count_toward_the_limit(client, clock):
    cache.clear()
    get_user_model().objects.create_user("carol", password="pw-For-tests-1")
    for _ in range(15):  # colleagues behind one NAT logging in
        assert _post(client, "carol", "pw-For-tests-1").status_code == 302
        client.logout()
    for _ in range(throttling.LOGIN_ATTEMPTS_PER_MINUTE):
        assert _post(client, "carol", "wrong").status_code == 200
    assert _post(client, "carol", "wrong").status_code == 429


@pytest.mark.django_db
def test_the_lockout_message_is_chinese_for_a_chinese_reader(client, clock):
    cache.clear()
    for _ in range(throttling.LOGIN_ATTEMPTS_PER_MINUTE):
        _post(client, "x", "y")
    blocked = client.post(
        "/accounts/login/", {"username": "x", "password": "y"}, HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert blocked.status_code == 429
    assert blocked["Retry-After"] == "60"


# ---------------------------------------------------------------------------- defect 6: static files


@pytest.mark.django_db
def test_static_files_are_hashed_compressed_and_cached_for_a_year(settings, tmp_path, client):
    from django.contrib.staticfiles.storage import staticfiles_storage
    from django.core.management import call_command
    from whitenoise.middleware import WhiteNoiseMiddleware

    from config.settings import base

    # Every settings module but the tests' own serves the manifest storage (the tests skip collectstatic).
    assert (
        base.STORAGES["staticfiles"]["BACKEND"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"
    )
    settings.STATIC_ROOT = tmp_path / "static"
    settings.STORAGES = base.STORAGES
    call_command("collectstatic", "--noinput", "-v", "0")
    bundle = staticfiles_storage.url(settings.SUANCHI_PLOTLY_JS)
    assert re.fullmatch(r"/static/vendor/plotly/plotly-basic\.min\.[0-9a-f]{12}\.js", bundle)
    rendered = Template("{% load suanchi %}{% plotly_scripts %}").render(Context({}))
    assert bundle in rendered and "plotly.min.js" not in rendered
    middleware = WhiteNoiseMiddleware(lambda request: None)
    response = middleware(RequestFactory().get(bundle, HTTP_ACCEPT_ENCODING="gzip, br"))
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert "max-age=315360000" in response["Cache-Control"] and "immutable" in response["Cache-Control"]
    # The full 4.6 MB bundle is not collected any more; the basic one compresses to a third.
    assert not (tmp_path / "static" / "vendor" / "plotly" / "plotly.min.js").exists()
    assert int(response["Content-Length"]) < 450_000


def test_the_charts_use_only_traces_of_the_basic_bundle():
    """plotly.js-basic-dist-min has scatter, bar and pie: no chart builder may use another trace."""
    import pathlib

    from django.conf import settings

    used = set()
    for path in pathlib.Path(settings.BASE_DIR, "apps").glob("*/charts.py"):
        text = path.read_text()
        used |= set(re.findall(r"go\.(\w+)\(", text)) - {"Figure"}
        used |= {m.capitalize() for m in re.findall(r"add_(\w+)\(", text) if m != "trace"}
    assert used <= {"Scatter", "Bar", "Pie"}, used


# ---------------------------------------------------------------------------- defect 8: error pages


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_member_gets_a_styled_403_saying_why_and_where_to_go(client, language):
    member = get_user_model().objects.create_user("member", password="pw-For-tests-1")
    client.force_login(member)
    client.cookies["django_language"] = language
    response = client.get("/catalog/templates/new/", HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 403
    body = response.content.decode()
    assert 'data-error-page="403"' in body and 'class="topbar"' in body and 'class="mainnav"' in body
    with translation.override(language):
        assert translation.gettext("This page is for platform staff only.") in body
        assert translation.gettext("Go to the fleet overview") in body


@pytest.mark.django_db
def test_a_wrong_id_gets_the_styled_404(client):
    client.force_login(get_user_model().objects.create_user("m2", password="pw-For-tests-1"))
    response = client.get("/jobs/987654/")
    assert response.status_code == 404
    body = response.content.decode()
    assert 'data-error-page="404"' in body and "/jobs/987654/" in body and 'class="mainnav"' in body


def test_the_500_page_renders_in_the_layout_without_a_request():
    from django.views.defaults import server_error

    response = server_error(RequestFactory().get("/"))
    assert response.status_code == 500
    body = response.content.decode()
    assert 'data-error-page="500"' in body and 'class="footer"' in body
