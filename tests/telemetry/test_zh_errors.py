"""Report parameters a reader got wrong (a threshold that is no number, a date that is no ISO
date-time, a period backwards or too long) are refused with 400 in the reader's language."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import translation

pytestmark = pytest.mark.django_db

API = "/api/telemetry/reports/"


@pytest.fixture(autouse=True)
def _english_afterwards():
    yield
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


def _refusal(api_client, staff_user, path, params, language):
    api_client.force_authenticate(staff_user)
    response = api_client.get(f"{API}{path}", params, HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 400
    return response.json()["error"]


def test_a_threshold_that_is_no_number_is_refused_in_chinese(api_client, staff_user):
    error = _refusal(api_client, staff_user, "idle-cards/", {"threshold": "half"}, "zh-hans")
    assert error["message"] == "threshold 必须是数字（百分比）。"
    assert error["details"] == {"threshold": ["number"]}


def test_a_start_that_is_no_date_is_refused_in_chinese(api_client, staff_user):
    error = _refusal(api_client, staff_user, "fleet/", {"start": "yesterday"}, "zh-hans")
    assert error["message"] == "start：不是 ISO 日期时间：'yesterday'。"
    assert "start" in error["details"]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "start 必须早于 end。"),
        ({"start": "2020-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "报表时间跨度最多 400 天。"),
    ],
)
def test_a_period_backwards_or_too_long_is_refused_in_chinese(api_client, staff_user, params, message):
    assert _refusal(api_client, staff_user, "fleet/", params, "zh-hans")["message"] == message


def test_the_english_refusals_read_as_before(api_client, staff_user):
    assert (
        _refusal(api_client, staff_user, "idle-cards/", {"threshold": "half"}, "en")["message"]
        == "threshold must be a number (percent)."
    )
    assert (
        _refusal(api_client, staff_user, "fleet/", {"start": "yesterday"}, "en")["message"]
        == "start: not an ISO date-time: 'yesterday'."
    )
