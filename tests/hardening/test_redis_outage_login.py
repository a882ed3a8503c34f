"""Redis down: login and the token API keep working (issue 15, finding 4).

The cache points at a real closed port on 127.0.0.1 (nothing listens there), not a mock: redis-py
raises ConnectionError on every add/incr/get, exactly as in an outage. The limiter falls back to a
per-process count, logs it and counts it, and nothing answers 500.
"""

from __future__ import annotations

import logging
import socket

import pytest
from django.test import override_settings

from apps.core import throttling

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.fixture
def redis_down():
    dead = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    throttling._fallback.clear()
    with override_settings(CACHES=dead):
        from django.core.cache import cache

        with pytest.raises(throttling.CACHE_ERRORS):  # the outage is real
            cache.add("probe", 1)
        yield
    throttling._fallback.clear()


def test_the_site_login_works_while_redis_is_down_and_the_failure_is_logged(
    client, make_user, redis_down, caplog
):
    make_user("carol", password="pw-For-tests-1")
    before = throttling.CACHE_FAILURES["count"]
    with caplog.at_level(logging.WARNING, logger="apps.core.throttling"):
        response = client.post("/accounts/login/", {"username": "carol", "password": "pw-For-tests-1"})
    assert response.status_code == 302
    assert response["Location"] == "/inventory/"
    assert client.get("/api/accounts/me/").json()["username"] == "carol"
    assert throttling.CACHE_FAILURES["count"] >= before + 2  # per address and per username
    assert "rate-limit cache unavailable" in caplog.text


def test_the_login_limit_still_holds_per_process_while_redis_is_down(client, make_user, redis_down):
    make_user("mallory")
    codes = [
        client.post("/accounts/login/", {"username": "mallory", "password": "wrong"}).status_code
        for _ in range(throttling.LOGIN_ATTEMPTS_PER_MINUTE + 1)
    ]
    assert 500 not in codes
    assert codes[:-1] == [200] * throttling.LOGIN_ATTEMPTS_PER_MINUTE
    assert codes[-1] == 429


def test_the_admin_login_answers_while_redis_is_down(client, staff_user, redis_down):
    response = client.post("/admin/login/", {"username": staff_user.username, "password": "pw-For-tests-1"})
    assert response.status_code == 302


def test_the_token_api_lists_and_creates_while_redis_is_down(api_client, make_user, redis_down):
    user = make_user()
    api_client.force_authenticate(user)
    listed = api_client.get("/api/accounts/tokens/")
    assert listed.status_code == 200
    created = api_client.post("/api/accounts/tokens/", {"name": "during-outage"}, format="json")
    assert created.status_code == 201
    assert created.json()["key"]
    assert api_client.get("/api/accounts/tokens/").json()["count"] == 1


def test_the_token_api_throttle_still_counts_while_redis_is_down(api_client, make_user, redis_down):
    user = make_user()
    api_client.force_authenticate(user)
    codes = [api_client.get("/api/accounts/tokens/").status_code for _ in range(31)]  # "token": 30/minute
    assert codes[:30] == [200] * 30
    assert codes[-1] == 429
