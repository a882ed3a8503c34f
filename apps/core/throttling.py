"""A small fixed-window limiter on the cache (Redis in production and tests).

Login attempts are counted per client address and per username: behind a reverse proxy the client
is the address the trusted proxy appended to ``X-Forwarded-For`` (``SUANCHI_TRUSTED_PROXIES`` says how
many proxies append to it), so one bad client cannot lock everybody out, and guessing one account's
password from many addresses is limited too.

When the shared cache is unreachable (Redis down) the limiter fails soft: the attempt is counted in a
per-process memory cache instead, the failure is logged and counted in ``CACHE_FAILURES``, and login
keeps working — still limited per web process — rather than answering 500 (issue 15, finding 4).
"""

from __future__ import annotations

import hashlib
import logging
import threading

from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from redis.exceptions import RedisError
from rest_framework.throttling import UserRateThrottle

logger = logging.getLogger(__name__)

# What an unreachable cache raises: redis-py's errors (ConnectionError, TimeoutError, …) and the
# operating system's (a refused socket, an unwritable file-cache folder).
CACHE_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError)

# Per-process stand-in used while the shared cache is down.
_fallback = LocMemCache("suanchi-throttle-fallback", {"TIMEOUT": 60, "OPTIONS": {"MAX_ENTRIES": 10000}})
_failures_lock = threading.Lock()
CACHE_FAILURES = {"count": 0}


def _count_cache_failure(exc: BaseException, what: str) -> None:
    with _failures_lock:
        CACHE_FAILURES["count"] += 1
    logger.warning("rate-limit cache unavailable (%s), using the per-process limiter: %r", what, exc)


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


def _hit_in(store, key: str, limit: int) -> bool:
    if store.add(key, 1, timeout=60):
        return False
    try:
        count = store.incr(key)
    except ValueError:  # expired between add and incr
        store.set(key, 1, timeout=60)
        return False
    return count > limit


def _hit(key: str, limit: int) -> bool:
    """Count one attempt in this minute's window; True when over ``limit``."""
    try:
        return _hit_in(cache, key, limit)
    except CACHE_ERRORS as exc:
        _count_cache_failure(exc, "login limiter")
        return _hit_in(_fallback, key, limit)


def login_rate_limited(request) -> bool:
    by_address = _hit(f"login-attempts:{client_address(request)}", LOGIN_ATTEMPTS_PER_MINUTE)
    username = (request.POST.get("username") or "").strip().lower()
    by_user = False
    if username:
        digest = hashlib.sha256(username.encode()).hexdigest()[:32]
        by_user = _hit(f"login-attempts-user:{digest}", LOGIN_ATTEMPTS_PER_USERNAME_PER_MINUTE)
    return by_address or by_user


class FailSoftUserRateThrottle(UserRateThrottle):
    """DRF's per-user throttle, counting in the per-process cache while the shared one is down.

    DRF's ``SimpleRateThrottle`` reads and writes ``self.cache`` (get + set) in ``allow_request``;
    an unreachable Redis would otherwise turn every throttled request into a 500.
    """

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except CACHE_ERRORS as exc:
            _count_cache_failure(exc, f"API throttle {self.scope}")
            shared, self.cache = self.cache, _fallback
            try:
                return super().allow_request(request, view)
            finally:
                self.cache = shared
