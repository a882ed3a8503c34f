"""/api/accounts/me/ under session authentication (the web UI's fetches, a browser on /api/docs/)."""

import pytest

pytestmark = pytest.mark.django_db


def test_me_answers_a_session_logged_in_user(client, make_user, make_project):
    user = make_user("erin", password="pw-For-tests-1")
    make_project("vision", members=[user])
    assert (
        client.post("/accounts/login/", {"username": "erin", "password": "pw-For-tests-1"}).status_code == 302
    )
    response = client.get("/api/accounts/me/")  # request.user is a SimpleLazyObject here
    assert response.status_code == 200
    body = response.json()
    assert body["username"] == "erin"
    assert [m["project"] for m in body["memberships"]] == ["vision"]
