"""Issue 21: member self-service — a profile page with language and time zone that every page follows,
and an API-token page (create with a name and an expiry, shown once, revoke)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.models import ApiToken, UserPreference

pytestmark = pytest.mark.django_db


def test_the_profile_sets_language_and_time_zone_for_every_page(client, make_user):
    user = make_user("zoe")
    client.force_login(user)
    response = client.post("/account/", {"language": "zh-hans", "time_zone": "Europe/London"})
    assert response.status_code == 302
    pref = UserPreference.objects.get(user=user)
    assert (pref.language, pref.time_zone) == ("zh-hans", "Europe/London")
    page = client.get("/account/")
    assert page.context["current_zone"] == "Europe/London"
    assert 'lang="zh-hans"' in page.content.decode() or "时区" in page.content.decode()


@pytest.mark.parametrize("data", [{"time_zone": "Mars/Olympus"}, {"language": "klingon"}])
def test_a_bad_preference_is_refused_and_nothing_is_saved(client, make_user, data):
    client.force_login(make_user())
    response = client.post("/account/", data)
    assert response.status_code == 400
    assert not UserPreference.objects.exists()


def test_tokens_are_created_shown_once_listed_and_revoked(client, make_user, api_client):
    user = make_user("tom")
    client.force_login(user)
    tomorrow = (timezone.localdate() + timedelta(days=30)).isoformat()
    response = client.post("/account/tokens/", {"name": "ci", "expires_on": tomorrow})
    assert response.status_code == 200
    key = re.search(r'id="new-key".*?<code>([^<]+)</code>', response.content.decode(), re.S).group(1)
    token = ApiToken.objects.get(user=user)
    assert token.name == "ci" and token.expires_at.date().isoformat() == tomorrow
    assert (
        ApiToken.hash_key(key) == token.key_hash
        and key not in client.get("/account/tokens/").content.decode()
    )
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api_client.get("/api/accounts/me/").status_code == 200
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert ApiToken.objects.get().revoked
    assert api_client.get("/api/accounts/me/").status_code in (401, 403)


def test_bad_token_input_creates_nothing_and_others_tokens_are_out_of_reach(client, make_user):
    owner = make_user("olga")
    client.force_login(owner)
    client.post("/account/tokens/", {"name": "mine"})
    other = make_user("oscar")
    client.force_login(other)
    assert client.post("/account/tokens/", {"name": ""}).status_code == 400
    yesterday = (timezone.localdate() - timedelta(days=1)).isoformat()
    assert client.post("/account/tokens/", {"name": "x", "expires_on": yesterday}).status_code == 400
    assert client.post(f"/account/tokens/{ApiToken.objects.get().pk}/revoke/").status_code == 404
    assert ApiToken.objects.count() == 1 and not ApiToken.objects.get().revoked
