"""Production settings: refuse to start without the required environment; secure cookies and headers."""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import CELERY_BROKER_URL, DATABASES, REDIS_URL, SECRET_KEY, env

DEBUG = False

if not SECRET_KEY or len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) must be set to 50+ characters")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" and not env.bool(
    "SUANCHI_ALLOW_SQLITE", default=False
):
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL in production")
if CELERY_BROKER_URL.startswith("filesystem://"):
    raise ImproperlyConfigured("CELERY_BROKER_URL must point at Redis in production")
if not REDIS_URL:
    # Without it each pod would fall back to its own file cache: the login limiter, the scheduling-cycle
    # lock and task progress must be shared by every web and worker pod (README, SECURITY.md).
    raise ImproperlyConfigured(
        "REDIS_URL (or REDIS_URL_FILE) must point at Redis in production: the login rate limiter and the "
        "scheduling-cycle lock are shared across pods through it"
    )

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SECURE = True
X_FRAME_OPTIONS = "DENY"
