"""A small fixed-window limiter on the cache (Redis in production and tests).

Login attempts are counted per client address and per username: behind a reverse proxy the client
is the address the trusted proxy appended to ``X-Forwarded-For`` (``SUANCHI_TRUSTED_PROXIES`` says how
many proxies append to it), so one bad client cannot lock everybody out, and guessing one account's
password from many addresses is limited too.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.cache import cache

LOGIN_ATTEMPTS_PER_MINUTE = 10
LOGIN_ATTEMPTS_PER_USERNAME_PER_MINUTE = 20


def client_address(request) -> str:
    """The client's address: ``REMOTE_ADDR``, or — behind N trusted proxies — the N-th entry from the
    right of ``X-Forwarded-For`` (entries further left are the client's own claims and not trusted)."""
    proxies = int(settings.SUANCHI.get("TRUSTED_PROXIES", 0) or 0)
    if proxies > 0:
        chain = [p.strip() for p in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if p.strip()]
        if len(chain) >= proxies:
            return chain[-proxies]
    return request.META.get("REMOTE_ADDR", "unknown")


def _hit(key: str, limit: int) -> bool:
    """Count one attempt in this minute's window; True when over ``limit``."""
    if cache.add(key, 1, timeout=60):
        return False
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=60)
        return False
    return count > limit


def login_rate_limited(request) -> bool:
    by_address = _hit(f"login-attempts:{client_address(request)}", LOGIN_ATTEMPTS_PER_MINUTE)
    username = (request.POST.get("username") or "").strip().lower()
    by_user = False
    if username:
        digest = hashlib.sha256(username.encode()).hexdigest()[:32]
        by_user = _hit(f"login-attempts-user:{digest}", LOGIN_ATTEMPTS_PER_USERNAME_PER_MINUTE)
    return by_address or by_user
