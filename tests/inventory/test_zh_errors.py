"""Issue 21 §5: inventory refusals (an export format, a tool output that cannot be parsed) reach a
zh-hans reader in Chinese; the ``code`` stays."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import translation

from apps.core.errors import ParseFailed
from apps.inventory.models import Device
from apps.inventory.vendors import detect_kind
from tests.inventory.test_discovery import gpu_csv, uuids

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english_afterwards():
    yield
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


def test_an_unknown_export_format_is_refused_in_chinese(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    response = api_client.get("/api/inventory/devices/export/?format=pdf", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["message"] == "未知导出格式 'pdf'；请使用 csv 或 xlsx。"


def test_output_of_an_unknown_tool_is_refused_in_chinese():
    with translation.override("zh-hans"), pytest.raises(ParseFailed) as refused:
        detect_kind("hello from some tool\n")
    assert refused.value.code == "parse_error"
    assert refused.value.message.startswith("第 1 行：无法判断是哪个工具输出的内容（'hello from some tool'）")
    assert refused.value.details["line"] == 1


def test_a_malformed_report_is_refused_in_chinese_naming_the_line(api_client, cluster, staff_user):
    api_client.force_authenticate(staff_user)
    before = Device.objects.count()
    response = api_client.post(
        "/api/inventory/node-reports/",
        {
            "node": "gpu-x",
            "cluster": "prod",
            "kind": "nvidia-smi-csv",
            "text": gpu_csv(uuids(2)) + "2, broken\n",
        },
        format="json",
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "parse_error" and error["details"]["line"] == 3
    assert error["message"].startswith("第 3 行：应有 ")
    assert "expected" not in error["message"] and "got" not in error["message"]
    assert Device.objects.count() == before
