"""Celery time limits per task family: no task holds a worker slot for ever.

Each task passes its family's options (``@shared_task(name=…, **time_limits.SHORT)``). At the soft
limit Celery raises ``SoftTimeLimitExceeded`` inside the task, so it can leave a clear status (a
background run is marked failed saying it ran past its time limit: ``apps.core.runs.run_fail``); at
the hard limit the worker process running it is killed and replaced (Celery "Workers guide: Time
limits", https://docs.celeryq.dev/en/stable/userguide/workers.html#time-limits). Limits are enforced
by the prefork pool; eager runs (tests) and the solo pool ignore them.
``tests/core/test_task_names.py`` checks every registered task has both limits, soft below hard.
"""

from __future__ import annotations

# Sends and checks: one batch of due notifications, a quota or alert evaluation, a fan-out of
# per-cluster messages, the staleness flagging. A minute is far more than they take.
SHORT = {"soft_time_limit": 60, "time_limit": 90}
# Talking to clusters and walking the fleet: a push, a reconcile or a sync of one cluster (each call
# bounded by the client timeout), a scheduling cycle, an ingest of the last metric windows, rollout
# and migration gate evaluations.
MEDIUM = {"soft_time_limit": 600, "time_limit": 660}
# Long runs: metering, a month close, a ledger import, a metric backfill (each a resumable or
# all-or-nothing run whose status says where it stopped).
LONG = {"soft_time_limit": 3 * 3600, "time_limit": 3 * 3600 + 300}
