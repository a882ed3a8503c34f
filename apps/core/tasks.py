"""One way to enqueue a Celery task after the caller's transaction commits.

``enqueue_on_commit(task_names.PUSH_STREAM, stream, queue="push")`` registers a
callback with ``transaction.on_commit`` (Django "Performing actions after commit",
https://docs.djangoproject.com/en/5.2/topics/db/transactions/#performing-actions-after-commit): the
message is sent only once the rows it names are visible to a worker, and never for a transaction
that rolled back. Outside a transaction (autocommit) it is sent at once.

Tasks are named, not imported: every app sits below ``worker/`` and must not import it; the names are
the constants of ``apps.core.task_names``. When the task is registered in the current Celery app (a
worker process, or any process that imported ``worker.tasks``) its own ``apply_async`` sends it, which honours the task's options (and test
doubles of it); otherwise ``current_app.send_task`` sends it by name, routed by ``task_routes``
(Celery "Calling Tasks" / ``Celery.send_task``,
https://docs.celeryq.dev/en/stable/reference/celery.html#celery.Celery.send_task).

Sending never fails the caller: the rows are committed already, and every task sent this way has a
periodic catch-up or a resume command. A broker outage is logged as a warning, counted in
``ENQUEUE_FAILURES`` (task name → failures in this process) and handed to ``on_failure`` so the
caller can record it on its row ("could not reach the task broker …").
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from celery import current_app
from django.db import transaction

logger = logging.getLogger(__name__)

# Sends that failed in this process, per task name (a warning counter; read by tests and ops shells).
ENQUEUE_FAILURES: Counter[str] = Counter()


def enqueue_on_commit(
    task_name: str,
    *args: Any,
    queue: str | None = None,
    on_failure: Callable[[], None] | None = None,
    using: str | None = None,
    **kwargs: Any,
) -> None:
    """Send the task ``task_name`` with ``args`` / ``kwargs`` (primary keys and small scalars: JSON)
    after the current transaction on ``using`` commits. ``queue`` overrides the route;
    ``on_failure`` runs (after commit, its own errors logged) when the broker refuses the message.
    Never raises for a broker outage."""
    transaction.on_commit(
        partial(enqueue_now, task_name, *args, queue=queue, on_failure=on_failure, **kwargs), using=using
    )


def enqueue_now(
    task_name: str,
    *args: Any,
    queue: str | None = None,
    on_failure: Callable[[], None] | None = None,
    **kwargs: Any,
) -> bool:
    """Send the task now; True when the broker took it. Same failure handling as ``enqueue_on_commit``."""
    options: dict[str, Any] = {}
    if args:
        options["args"] = list(args)
    if kwargs:
        options["kwargs"] = kwargs
    if queue:
        options["queue"] = queue
    try:
        task = current_app.tasks.get(task_name)
        if task is not None:
            task.apply_async(**options)
        else:
            current_app.send_task(task_name, **options)
    except Exception:  # noqa: BLE001 - the broker may be down; the caller's periodic catch-up runs it
        ENQUEUE_FAILURES[task_name] += 1
        logger.warning("could not enqueue %s; it stays to the periodic catch-up", task_name, exc_info=True)
        if on_failure is not None:
            try:
                on_failure()
            except Exception:  # noqa: BLE001 - recording the outage must not fail the caller either
                logger.exception("recording that %s was not enqueued failed", task_name)
        return False
    return True
