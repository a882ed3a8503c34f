"""Issue 21 §5: catalog import refusals reach a zh-hans reader in Chinese; the ``code`` stays."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import translation

from apps.catalog import services
from apps.catalog.models import DeviceModel
from apps.core.errors import ValidationFailed
from tests.catalog.conftest import api_as

pytestmark = pytest.mark.django_db

IMPORT_URL = "/api/catalog/request-templates/import/"


@pytest.fixture(autouse=True)
def _english_afterwards():
    yield
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


def test_a_document_that_is_not_utf8_is_refused_in_chinese(staff):
    client = api_as(staff)
    body = "kind: x\nname: caf\xe9\n".encode("latin-1")
    response = client.generic(
        "POST", IMPORT_URL, body, content_type="application/yaml", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert error["message"] == "文档不是 UTF-8 文本"
    english = client.generic("POST", IMPORT_URL, body, content_type="application/yaml")
    assert english.json()["error"]["message"] == "the document is not UTF-8 text"


def test_a_catalog_file_with_a_row_without_slug_is_refused_in_chinese(tmp_path):
    path = tmp_path / "device_models.yaml"
    path.write_text("schema_version: 1\ndevice_models:\n  - name: X1\n", encoding="utf-8")
    before = DeviceModel.objects.count()
    with translation.override("zh-hans"), pytest.raises(ValidationFailed) as refused:
        services.catalog_sync(actor="test", path=path)
    assert refused.value.code == "invalid"
    assert refused.value.message == f"{path}：device_models[0] 没有 slug"
    assert DeviceModel.objects.count() == before
