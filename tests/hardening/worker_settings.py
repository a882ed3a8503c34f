"""Settings for the Celery worker subprocesses of the fault-injection tests: the test settings, with a
short visibility timeout so that a task whose worker was killed is redelivered within seconds (the
production value is an hour)."""

from config.settings.test import *  # noqa: F403

CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 2,
    # Look for timed-out unacknowledged messages every second (kombu's default: every 100 s).
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}
