"""Issue 21 §5: the generic refusal of a form the API cannot accept reaches a zh-hans reader in Chinese
(it was the one English sentence left in a Chinese 400 answer); the ``code`` and the field details stay."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import translation

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english_afterwards():
    yield
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


@pytest.mark.parametrize(("language", "message"), [("zh-hans", "输入无效。"), ("en", "Invalid input.")])
def test_a_refused_submit_says_invalid_input_in_the_readers_language(
    api_client, make_user, make_project, language, message
):
    user = make_user()
    project = make_project(members=[user])
    api_client.force_authenticate(user)
    response = api_client.post(
        "/api/jobs/jobs/",
        {"project": project.slug, "name": "x", "image": "x", "request_kind": "whole_cards", "count": -3},
        format="json",
        HTTP_ACCEPT_LANGUAGE=language,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["message"] == message
    assert "count" in error["details"]
