"""Issue 21 §5: a refused migration shift answers a zh-hans reader in Chinese; the ``code`` stays."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import translation

from apps.migration.models import MigrationAction
from tests.fixtures.migration import inference_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english_afterwards():
    yield
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


def url(service, verb):
    return f"/api/migration/services/{service.pk}/{verb}/"


def test_weights_that_do_not_add_up_are_refused_in_chinese(dual, api_client):
    service, user, _project = dual
    api_client.force_authenticate(user)
    response = api_client.post(
        url(service, "shift"),
        {"source_weight": 80, "target_weight": 15},
        format="json",
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["message"] == "流量权重之和必须为 100（源 80 + 目标 15 = 95）。"
    assert not MigrationAction.objects.filter(kind="shift").exists()


def test_shifting_an_unscheduled_service_is_refused_in_chinese(
    fleet, member_project, a100, ascend, plan, api_client
):
    from apps.migration import services

    user, project = member_project
    one = inference_job(project, user, a100, "a", schedule=False)
    two = inference_job(project, user, ascend, "b", schedule=False)
    service = services.service_create(actor=user, plan=plan, name="idle", source_job=one, target_job=two)
    api_client.force_authenticate(user)
    response = api_client.post(
        url(service, "shift"), {"step": 10}, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "invalid_transition"
    with translation.override("zh-hans"):
        from apps.jobs.models import JobState

        pending = str(JobState.PENDING.label)
    assert pending != "pending"
    message = error["message"]
    assert message.startswith("副本只能在已调度或运行中的轨道之间切换：") and message.endswith("。")
    assert f"源作业 {one.pk} 当前为 {pending}" in message and f"目标作业 {two.pk} 当前为 {pending}" in message
    assert "pending" not in message and "job" not in message
