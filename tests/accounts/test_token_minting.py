"""Issue 27 §4 and §8: who may make API tokens, what a new key's answer may leave in caches, and the
expiry dates and project bodies that answered 500.

* A request authenticated by an API token may not create a token (a token expiring tomorrow made
  one that never expired and outlived its revocation), nor revoke another token; it may list the
  caller's tokens and revoke itself. A signed-in session still does everything.
* Every answer that carries a plain key (the token page, the API's 201) is ``Cache-Control: no-store``.
* An expiry the calendar does not have (``2026-13-01``), one no time zone holds (``0001-01-01``), one
  in the past or more than ten years ahead is a 400 that says why, on the page and in the API.
* Project creation with ``is_active`` in the body is a 201 (it was a 500).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.expiry import MAX_LIFETIME, parse_expiry
from apps.accounts.models import ApiToken, Department, Project
from apps.accounts.services import api_token_create
from apps.core.errors import ValidationFailed

pytestmark = pytest.mark.django_db

TOKENS = "/api/accounts/tokens/"


def token_client(api_client, user, **create):
    token, key = api_token_create(user=user, name="parent", actor=user, **create)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return token


# ---- minting ------------------------------------------------------------------------------------


def test_a_token_expiring_tomorrow_cannot_mint_a_token_that_never_expires(api_client, make_user):
    user = make_user("mallory")
    parent = token_client(api_client, user, expires_at=timezone.now() + timedelta(days=1))

    response = api_client.post(TOKENS, {"name": "forever"}, format="json")

    assert response.status_code == 403, response.content
    assert "created only by a signed-in person" in response.json()["error"]["message"]
    assert list(ApiToken.objects.values_list("pk", flat=True)) == [parent.pk]
    assert "key" not in response.content.decode()


def test_a_token_lists_and_revokes_itself_but_not_its_siblings(api_client, make_user):
    user = make_user("tina")
    sibling, _key = api_token_create(user=user, name="sibling", actor=user)
    mine = token_client(api_client, user)

    listed = api_client.get(TOKENS)
    assert listed.status_code == 200
    assert {t["name"] for t in listed.json()["results"]} == {"sibling", "parent"}
    assert "key" not in listed.json()["results"][0]

    refused = api_client.delete(f"{TOKENS}{sibling.pk}/")
    assert refused.status_code == 403
    assert "may revoke only that token" in refused.json()["error"]["message"]
    assert not ApiToken.objects.get(pk=sibling.pk).revoked

    assert api_client.delete(f"{TOKENS}{mine.pk}/").status_code == 204
    assert ApiToken.objects.get(pk=mine.pk).revoked
    assert api_client.get(TOKENS).status_code == 401  # the revoked key no longer authenticates


def test_a_signed_in_session_creates_and_revokes_tokens_and_the_key_is_not_cached(api_client, make_user):
    user = make_user("sam")
    other, _key = api_token_create(user=user, name="old", actor=user)
    api_client.force_login(user)

    response = api_client.post(TOKENS, {"name": "ci"}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["key"].startswith("sc_")
    assert "no-store" in response["Cache-Control"]
    assert api_client.delete(f"{TOKENS}{other.pk}/").status_code == 204
    assert ApiToken.objects.get(pk=other.pk).revoked


def test_the_token_page_is_never_cached_and_shows_the_key_once(client, make_user):
    client.force_login(make_user("paula"))
    page = client.get("/account/tokens/")
    assert "no-store" in page["Cache-Control"]
    created = client.post("/account/tokens/", {"name": "laptop"})
    assert created.status_code == 200
    assert re.search(r'id="new-key".*?<code>sc_', created.content.decode(), re.S)
    assert "no-store" in created["Cache-Control"]


# ---- expiry -------------------------------------------------------------------------------------


def _bad_expiries() -> list[tuple[str, str]]:
    today = timezone.localdate()
    return [
        ("2026-13-01", "not a date the calendar has"),
        ("2027-02-30", "not a date the calendar has"),
        ("2027-01-01T25:00:00Z", "not a date the calendar has"),
        ("0001-01-01", "must be in the future"),
        ("9999-12-31", "at most 10 years ahead"),
        ((today - timedelta(days=1)).isoformat(), "must be in the future"),
        ((today + MAX_LIFETIME + timedelta(days=2)).isoformat(), "at most 10 years ahead"),
        ("next tuesday", "is not a date: use YYYY-MM-DD"),
        ("+10000-01-01", "is not a date: use YYYY-MM-DD"),
    ]


@pytest.mark.parametrize(("value", "reason"), _bad_expiries())
def test_an_impossible_expiry_is_a_400_that_says_why_in_the_api(api_client, make_user, value, reason):
    api_client.force_login(make_user())
    response = api_client.post(TOKENS, {"name": "ci", "expires_at": value}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert reason in error["message"] and reason in error["details"]["expires_at"][0]
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(("value", "reason"), _bad_expiries())
def test_an_impossible_expiry_is_a_400_that_says_why_on_the_page(client, make_user, value, reason):
    client.force_login(make_user())
    response = client.post("/account/tokens/", {"name": "ci", "expires_on": value})
    assert response.status_code == 400
    assert reason in response.content.decode().replace("&#x27;", "'")
    assert not ApiToken.objects.exists()


def test_an_expiry_is_a_date_or_a_date_and_time_in_the_future(api_client, make_user):
    api_client.force_login(make_user())
    day = (timezone.localdate() + timedelta(days=30)).isoformat()
    by_day = api_client.post(TOKENS, {"name": "a", "expires_at": day}, format="json")
    assert by_day.status_code == 201, by_day.content
    token = ApiToken.objects.get(name="a")
    assert timezone.localtime(token.expires_at).date().isoformat() == day
    assert timezone.localtime(token.expires_at).time().isoformat() == "23:59:59"
    moment = api_client.post(TOKENS, {"name": "b", "expires_at": f"{day}T18:00:00+08:00"}, format="json")
    assert moment.status_code == 201, moment.content
    assert api_client.post(TOKENS, {"name": "c", "expires_at": None}, format="json").status_code == 201
    assert ApiToken.objects.get(name="c").expires_at is None
    assert parse_expiry("") is None and parse_expiry("  ") is None


def test_the_service_and_the_admin_keep_the_same_expiry_bound(make_user):
    user = make_user()
    with pytest.raises(ValidationFailed) as caught:
        api_token_create(user=user, name="x", expires_at=timezone.now() - timedelta(minutes=1), actor=user)
    assert "must be in the future" in caught.value.message
    assert not ApiToken.objects.exists()


def test_the_admin_refuses_a_past_expiry_on_the_form(client, staff_user, make_user):
    owner = make_user("owner")
    client.force_login(staff_user)
    response = client.post(
        "/admin/accounts/apitoken/add/",
        {"user": owner.pk, "name": "x", "expires_at_0": "2020-01-01", "expires_at_1": "00:00:00"},
    )
    assert response.status_code == 200
    assert "must be in the future" in str(response.context["adminform"].form.errors)
    assert not ApiToken.objects.exists()


# ---- project creation ---------------------------------------------------------------------------


def test_staff_create_an_inactive_project_with_is_active_in_the_body(api_client, staff_user):
    Department.objects.create(name="Vision", slug="vision")
    api_client.force_authenticate(staff_user)
    body = {"department": "vision", "name": "Frozen", "slug": "frozen", "namespace": "frozen"}
    response = api_client.post("/api/accounts/projects/", {**body, "is_active": False}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["is_active"] is False
    assert Project.objects.get(slug="frozen").is_active is False
    bad = api_client.post("/api/accounts/projects/", {**body, "slug": "f2", "is_active": None}, format="json")
    assert bad.status_code == 400 and "is_active" in bad.json()["error"]["details"]


def test_the_admin_shows_a_new_api_key_on_an_uncached_page_not_in_a_message(client, staff_user, make_user):
    owner = make_user("owner")
    client.force_login(staff_user)
    response = client.post("/admin/accounts/apitoken/add/", {"user": owner.pk, "name": "ci"})
    assert response.status_code == 200, response.content[:500]
    key = re.search(r'<code id="new-key">(sc_[^<]+)</code>', response.content.decode()).group(1)
    assert ApiToken.objects.get(name="ci").key_hash == ApiToken.hash_key(key)
    assert "no-store" in response["Cache-Control"]
    assert key not in str(response.cookies) and "messages" not in response.cookies
