"""Authentication and tenancy scoping of the accounts API."""

import pytest

from apps.accounts.models import ApiToken
from apps.accounts.services import api_token_create
from apps.core.models import ChangeRecord

pytestmark = pytest.mark.django_db


def test_anonymous_api_calls_get_401_with_the_stable_error_body(api_client):
    response = api_client.get("/api/accounts/projects/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_a_user_token_authenticates_and_only_its_hash_is_stored(api_client, make_user):
    user = make_user()
    token, key = api_token_create(user=user, name="ci", actor=user)
    assert ApiToken.objects.get(pk=token.pk).key_hash != key
    assert key not in ApiToken.objects.get(pk=token.pk).key_hash
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = api_client.get("/api/accounts/me/")
    assert response.status_code == 200
    assert response.json()["username"] == user.username
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None


def test_a_bearer_token_works_and_a_wrong_token_is_refused(api_client, make_user):
    user = make_user()
    _, key = api_token_create(user=user, name="ci", actor=user)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api_client.get("/api/accounts/me/").status_code == 200
    api_client.credentials(HTTP_AUTHORIZATION="Token sc_not-a-real-key")
    response = api_client.get("/api/accounts/me/")
    assert response.status_code == 401
    assert "Invalid" in response.json()["error"]["message"]


def test_a_revoked_token_stops_working(api_client, make_user):
    user = make_user()
    api_client.force_authenticate(user)
    created = api_client.post("/api/accounts/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    key = created.json()["key"]
    assert api_client.delete(f"/api/accounts/tokens/{created.json()['id']}/").status_code == 204
    assert ChangeRecord.objects.filter(action="api_token.revoke").count() == 1
    api_client.force_authenticate(None)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api_client.get("/api/accounts/me/").status_code == 401


def test_users_see_only_their_projects_and_staff_see_all(api_client, make_user, make_project, staff_user):
    alice, bob = make_user("alice"), make_user("bob")
    make_project("vision", members=[alice])
    make_project("nlp", members=[bob])
    api_client.force_authenticate(alice)
    slugs = {p["slug"] for p in api_client.get("/api/accounts/projects/").json()["results"]}
    assert slugs == {"vision"}
    api_client.force_authenticate(staff_user)
    slugs = {p["slug"] for p in api_client.get("/api/accounts/projects/").json()["results"]}
    assert slugs == {"vision", "nlp"}


def test_an_outsider_gets_404_for_another_projects_detail(api_client, make_user, make_project):
    outsider = make_user()
    project = make_project("secret")
    api_client.force_authenticate(outsider)
    assert api_client.get(f"/api/accounts/projects/{project.pk}/").status_code == 404


def test_only_staff_create_projects_and_bad_namespaces_get_field_errors(
    api_client, make_user, make_project, staff_user
):
    member = make_user()
    existing = make_project("base", members=[member])
    payload = {"department": existing.department.slug, "name": "New", "slug": "new", "namespace": "new-ns"}
    api_client.force_authenticate(member)
    assert api_client.post("/api/accounts/projects/", payload, format="json").status_code == 403
    api_client.force_authenticate(staff_user)
    bad = api_client.post("/api/accounts/projects/", {**payload, "namespace": "Not_A_Label"}, format="json")
    assert bad.status_code == 400
    assert "namespace" in bad.json()["error"]["details"]
    good = api_client.post("/api/accounts/projects/", payload, format="json")
    assert good.status_code == 201, good.content
    assert ChangeRecord.objects.filter(action="project.create", object_id=str(good.json()["id"])).exists()


def test_non_staff_cannot_reach_the_admin(client, make_user, staff_user):
    member = make_user(password="pw-For-tests-1")
    client.force_login(member)
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
    client.force_login(staff_user)
    assert client.get("/admin/").status_code == 200


def test_login_is_rate_limited(client, make_user):
    make_user("mallory")
    codes = [
        client.post("/accounts/login/", {"username": "mallory", "password": "wrong"}).status_code
        for _ in range(12)
    ]
    assert codes[:10] == [200] * 10
    assert codes[-1] == 429


def test_csrf_is_enforced_on_session_posts(make_user):
    from django.test import Client

    user = make_user()
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post("/api/accounts/tokens/", {"name": "x"})
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]


def _request(authorization: str):
    from rest_framework.test import APIRequestFactory

    return APIRequestFactory().get("/api/accounts/me/", HTTP_AUTHORIZATION=authorization)


def test_user_token_authentication_leaves_agent_keys_and_other_schemes_to_the_next_class():
    from apps.accounts.authentication import TokenAuthentication

    auth = TokenAuthentication()
    # An agent key is the inventory's (apps.inventory.authentication), never looked up as a user token.
    assert auth.authenticate(_request("Token sca_" + "x" * 43)) is None
    assert auth.authenticate(_request("Basic dXNlcjpwdw==")) is None


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("Token", "expected 'Token <key>'"),
        ("Token a b", "expected 'Token <key>'"),
        ("Token sc_x", "Invalid or revoked"),
    ],
)
def test_a_malformed_or_unknown_user_token_is_a_401_that_says_why(api_client, header, message):
    api_client.credentials(HTTP_AUTHORIZATION=header)
    response = api_client.get("/api/accounts/me/")
    assert response.status_code == 401
    assert message in response.json()["error"]["message"]
    # The first authentication class names the scheme a client should use.
    assert response["WWW-Authenticate"] == "Token"


def test_an_expired_user_token_is_refused(api_client, make_user):
    import datetime as dt

    from django.utils import timezone

    user = make_user()
    token, key = api_token_create(user=user, name="ci", actor=user)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = api_client.get("/api/accounts/me/")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Token expired."
