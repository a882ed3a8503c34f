"""Local demo settings: embedded defaults (SQLite under var/, filesystem broker, simulated cluster)."""

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
# A fixed key is acceptable only for the local demo; production.py refuses to start without one.
SECRET_KEY = SECRET_KEY or "suanchi-local-demo-key-not-for-production"  # noqa: F405, S105

# The demo's simulated cluster runs an hour-long job in a minute, so a visitor sees jobs finish.
SUANCHI["SIMULATED_TIME_SCALE"] = env.float("SUANCHI_SIMULATED_TIME_SCALE", default=60.0)  # noqa: F405
# Notification e-mails are printed by the demo (no mail server); its webhook receivers may be local.
EMAIL_BACKEND = env.str("DJANGO_EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
SUANCHI["OUTBOUND_ALLOWED_NETWORKS"] = [*SUANCHI["OUTBOUND_ALLOWED_NETWORKS"], "127.0.0.0/8", "::1/128"]  # noqa: F405
