"""Issue 15, finding 11: request body limits are consistent. Every documented limit (node reports 4 MiB,
exporter pages 8 Mi characters) is reachable and answers with its own JSON error; a body beyond
DATA_UPLOAD_MAX_MEMORY_SIZE is a JSON 413 naming the limit, not Django's HTML 400 page."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from apps.jobs.models import Job
from apps.telemetry import exposition

pytestmark = pytest.mark.django_db


def test_the_body_limit_sits_above_every_documented_limit():
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert limit >= 2 * settings.SUANCHI["NODE_REPORT_MAX_BYTES"]  # JSON escaping may double a text
    assert limit >= 2 * exposition.MAX_TEXT_CHARS


def test_a_body_over_the_limit_is_a_json_413_naming_the_limit(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps({"project": "x", "env": {"A": "x" * (limit + 1)}})
    for path in ("/api/jobs/jobs/", "/api/inventory/node-reports/", "/api/telemetry/scrapes/"):
        response = api_client.post(path, body, content_type="application/json")
        assert response.status_code == 413, (path, response.content[:200])
        assert response["Content-Type"].startswith("application/json")
        error = response.json()["error"]
        assert error["code"] == "too_large"
        assert str(limit) in error["message"] and error["details"] == {"limit_bytes": limit}
    assert Job.objects.count() == 0


def test_a_node_report_over_its_own_limit_gets_its_own_error(api_client, staff_user):
    """Before: 2.5 MiB bodies died in Django's HTML 400, so the 4 MiB report limit was never reached."""
    api_client.force_authenticate(staff_user)
    limit = settings.SUANCHI["NODE_REPORT_MAX_BYTES"]
    response = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "gpu-x", "kind": "nvidia-smi-xml", "text": "<a>" + "x" * limit + "</a>"},
        format="json",
    )
    assert response.status_code == 400, response.content[:300]
    assert f"the limit is {limit} bytes" in response.json()["error"]["message"]


def test_an_exporter_page_over_its_limit_gets_a_field_error(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    text = "x_total 1\n" * (exposition.MAX_TEXT_CHARS // 10 + 1)
    response = api_client.post("/api/telemetry/scrapes/", {"text": text}, format="json")
    assert response.status_code == 400
    assert "text" in response.json()["error"]["details"]
