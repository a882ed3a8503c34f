"""A small fixed-window limiter on the cache (Redis in production and tests)."""

from __future__ import annotations

from django.core.cache import cache

LOGIN_ATTEMPTS_PER_MINUTE = 10


def _client_ip(request) -> str:
    return request.META.get("REMOTE_ADDR", "unknown")


def login_rate_limited(request) -> bool:
    key = f"login-attempts:{_client_ip(request)}"
    added = cache.add(key, 1, timeout=60)
    if added:
        return False
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=60)
        return False
    return count > LOGIN_ATTEMPTS_PER_MINUTE
