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
import math
import threading
import time
from typing import Any

from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from redis.exceptions import RedisError
from rest_framework.throttling import UserRateThrottle

from apps.core.conf import suanchi_setting

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
# The window opens at a client's first failed attempt and lasts exactly this long; the 429 says how much
# of it is left. Successful logins are never counted.
LOGIN_WINDOW_SECONDS = 60


def client_address(request) -> str:
    """The client's address: ``REMOTE_ADDR``, or — behind N trusted proxies — the N-th entry from the
    right of ``X-Forwarded-For`` (entries further left are the client's own claims and not trusted)."""
    proxies = int(suanchi_setting("TRUSTED_PROXIES", 0) or 0)
    if proxies > 0:
        chain = [p.strip() for p in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if p.strip()]
        if len(chain) >= proxies:
            return chain[-proxies]
    return request.META.get("REMOTE_ADDR", "unknown")


def _keys(request) -> list[tuple[str, int]]:
    keys = [(f"login-failures:{client_address(request)}", LOGIN_ATTEMPTS_PER_MINUTE)]
    username = (request.POST.get("username") or "").strip().lower()
    if username:
        digest = hashlib.sha256(username.encode()).hexdigest()[:32]
        keys.append((f"login-failures-user:{digest}", LOGIN_ATTEMPTS_PER_USERNAME_PER_MINUTE))
    return keys


def _window_start(store, base: str, now: float) -> float | None:
    """When the open window of ``base`` began, or None when none is open.

    The start is written once with ``add`` and its own timeout (never ``incr``-ed: the file cache's
    ``incr`` rewrites an entry with the default 300 s timeout, which once made the lockout outlive its
    message). The counter's key carries the start, so a counter left over from an older window is never
    read again whatever its own lifetime."""
    start = store.get(f"{base}:start")
    if start is None or now - float(start) >= LOGIN_WINDOW_SECONDS:
        return None
    return float(start)


def _wait_in(store, base: str, limit: int, now: float) -> int:
    start = _window_start(store, base, now)
    if start is None:
        return 0
    failures = store.get(f"{base}:{start:.3f}") or 0
    if failures < limit:
        return 0
    return max(1, math.ceil(start + LOGIN_WINDOW_SECONDS - now))


def _fail_in(store, base: str, now: float) -> None:
    start = _window_start(store, base, now)
    if start is None:
        start = now
        store.set(f"{base}:start", start, timeout=LOGIN_WINDOW_SECONDS)
    counter = f"{base}:{start:.3f}"
    store.add(counter, 0, timeout=LOGIN_WINDOW_SECONDS + 5)
    try:
        store.incr(counter)
    except ValueError:  # expired between add and incr
        store.set(counter, 1, timeout=LOGIN_WINDOW_SECONDS + 5)


def _fail_soft(what, *args):
    try:
        return what(cache, *args)
    except CACHE_ERRORS as exc:
        _count_cache_failure(exc, "login limiter")
        return what(_fallback, *args)


def login_wait_seconds(request) -> int:
    """Seconds until this client (address, or username) may try again; 0 when it may now.

    Only failed attempts count: 10 a minute per address, 20 per username across addresses."""
    now = time.time()
    return max(_fail_soft(_wait_in, base, limit, now) for base, limit in _keys(request))


def record_login_failure(request) -> None:
    """Count one failed attempt in the open window of the address and of the username."""
    now = time.time()
    for base, _limit in _keys(request):
        _fail_soft(_fail_in, base, now)


def login_rate_limited(request) -> bool:
    """True when this client must wait (see ``login_wait_seconds``); counts nothing."""
    return login_wait_seconds(request) > 0


class FailSoftUserRateThrottle(UserRateThrottle):
    """DRF's per-user throttle, counting in the per-process cache while the shared one is down.

    DRF's ``SimpleRateThrottle`` reads and writes ``self.cache`` (get + set) in ``allow_request``;
    an unreachable Redis would otherwise turn every throttled request into a 500.
    """

    cache: Any

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
