"""Test settings: real PostgreSQL and Redis on this machine (override with DATABASE_URL / REDIS_URL)."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/suanchi")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")

from .base import *  # noqa: E402, F403
from .base import REDIS_URL  # noqa: E402

DEBUG = False
SECRET_KEY = "suanchi-tests-only"  # noqa: S105
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        # One prefix per test database: suites running side by side (other checkouts, CI) never
        # share locks or throttles through the cache.
        "KEY_PREFIX": "suanchi-test-" + os.environ["DATABASE_URL"].rsplit("/", 1)[-1],
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/14")
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}

# The notification tests run their webhook receivers on 127.0.0.1.
SUANCHI["OUTBOUND_ALLOWED_NETWORKS"] = [*SUANCHI["OUTBOUND_ALLOWED_NETWORKS"], "127.0.0.0/8", "::1/128"]  # noqa: F405
