"""Issue 21 §5: a refused rollout command answers a zh-hans reader in Chinese; the ``code`` stays."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import translation

from apps.rollout.models import GrayBatch
from tests.rollout.test_api import API, create_batch

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english_afterwards():
    yield
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


def test_evaluating_a_planned_batch_is_refused_in_chinese(staff_client, fleet, criteria):
    batch = create_batch(staff_client, criteria, [fleet["gpu-01"]], name="idle")
    response = staff_client.post(f"{API}/batches/{batch['id']}/evaluate/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "invalid_transition"
    with translation.override("zh-hans"):
        planned = str(GrayBatch.Stage.PLANNED.label)
    assert planned != "planned"
    assert error["message"] == f"批次 idle 当前为 {planned}；只评估浸泡中的批次"


def test_admitting_a_soaking_batch_is_refused_in_chinese(staff_client, fleet, criteria):
    batch = create_batch(staff_client, criteria, [fleet["gpu-02"]], name="canary")
    assert staff_client.post(f"{API}/batches/{batch['id']}/start-soak/").status_code == 200
    response = staff_client.post(
        f"{API}/batches/{batch['id']}/admit/", {}, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "soak_not_passed"
    assert error["message"].startswith("批次 canary 当前为 ")
    assert "其浸泡测试尚未通过" in error["message"] and "soak has not passed" not in error["message"]
    # The same refusal in English for an English reader.
    response = staff_client.post(f"{API}/batches/{batch['id']}/admit/", {}, format="json")
    assert "soak has not passed" in response.json()["error"]["message"]
