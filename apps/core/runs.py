"""Background runs: create one, hand it to a worker after commit, publish its progress, finish or fail it.

Every long operation (a ledger import, a metric backfill, a month close) is one ``BackgroundRun``
row. The caller owns the work and names it with a ``kind`` string ("inventory.ledger_import"); this
module knows no kind and imports nothing above core.

Progress goes through the cache (``run_progress``): the work often runs inside one long transaction
(an all-or-nothing import), whose own writes a page polling the run cannot see until it commits. The
cache is shared by web and worker processes (Redis, or the file cache of the embedded demo: see
``CACHES`` in config/settings/base.py). Outside a transaction the row is updated too, so progress
survives a cache flush; ``run_finish`` / ``run_fail`` write the last progress to the row.

State moves are conditional updates (queued → running → succeeded | failed), so a redelivered task
message finds its run no longer queued and does nothing.
"""

from __future__ import annotations

import sys
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from apps.core.audit import actor_fields
from apps.core.models import BackgroundRun
from apps.core.stored_text import stored
from apps.core.validation import validate_and_save

Status: Any = BackgroundRun.Status
PROGRESS_TTL_S = 24 * 3600
BROKER_DOWN = stored("could not reach the task broker; the run is still queued")
TIME_LIMIT_REACHED = stored("stopped: the run went past its time limit; start it again")


def progress_key(run_id: int) -> str:
    return f"suanchi:run:{run_id}:progress"


def run_create(*, kind: str, actor: Any, params: dict | None = None, message: str = "") -> BackgroundRun:
    """A queued run of ``kind`` asked for by ``actor`` (a user or a label such as "worker")."""
    who = actor_fields(actor)
    run = BackgroundRun(
        kind=kind,
        actor=who["actor"],
        actor_label=who["actor_label"],
        params=params or {},
        progress_message=message[:200],
    )
    return validate_and_save(run, what="background run")


def run_enqueue(*, run: BackgroundRun, task: str, args: list | None = None, queue: str | None = None) -> None:
    """After the caller's transaction commits, send ``task`` by name (default arguments: the run's
    id) through ``apps.core.tasks.enqueue_on_commit``. Never fails the caller: with the broker down
    the run stays queued and its message says so."""
    from apps.core.tasks import enqueue_on_commit

    run_id = run.pk

    def broker_down() -> None:
        BackgroundRun.objects.filter(pk=run_id, status=Status.QUEUED).update(progress_message=BROKER_DOWN)

    enqueue_on_commit(
        task, *(list(args) if args is not None else [run_id]), queue=queue, on_failure=broker_down
    )


def run_start(*, run_id: int, kind: str | None = None, resume: bool = False) -> BackgroundRun | None:
    """Move a queued run (of ``kind``, when given) to running and return it; None when it is gone,
    of another kind or no longer queued (a redelivered message). With ``resume`` a run left running
    by a worker that died is taken too."""
    states = [Status.QUEUED, Status.RUNNING] if resume else [Status.QUEUED]
    runs = BackgroundRun.objects.filter(pk=run_id, status__in=states)
    if kind is not None:
        runs = runs.filter(kind=kind)
    if not runs.update(status=Status.RUNNING, started_at=timezone.now()):
        return None
    return BackgroundRun.objects.get(pk=run_id)


def run_progress(
    *, run: BackgroundRun, done: int | None = None, total: int | None = None, message: str | None = None
) -> None:
    """Publish progress now, visible to a page polling the run even while the caller's transaction
    is open. Unknown parts keep their last value."""
    if total is not None:
        run.progress_total = max(0, int(total))
    if done is not None:
        run.progress_done = max(0, int(done))
    if run.progress_total and run.progress_done > run.progress_total:
        run.progress_done = run.progress_total
    if message is not None:
        run.progress_message = message[:200]
    live = {"done": run.progress_done, "total": run.progress_total, "message": run.progress_message}
    cache.set(progress_key(run.pk), live, timeout=PROGRESS_TTL_S)
    if not connection.in_atomic_block:
        BackgroundRun.objects.filter(pk=run.pk).update(
            progress_done=run.progress_done,
            progress_total=run.progress_total,
            progress_message=run.progress_message,
        )


def _over(run: BackgroundRun, *, status: str, result: dict | None, error: str, message: str | None) -> bool:
    live = cache.get(progress_key(run.pk)) or {}
    run.progress_done = live.get("done", run.progress_done)
    run.progress_total = live.get("total", run.progress_total)
    if message is not None:
        run.progress_message = message[:200]
    elif "message" in live:
        run.progress_message = live["message"]
    fields = {
        "status": status,
        "finished_at": timezone.now(),
        "progress_done": run.progress_done,
        "progress_total": run.progress_total,
        "progress_message": run.progress_message,
        "error": error,
    }
    if result is not None:
        fields["result"] = result
    changed = BackgroundRun.objects.filter(pk=run.pk, status__in=[Status.QUEUED, Status.RUNNING]).update(
        **fields
    )
    if changed:
        for name, value in fields.items():
            setattr(run, name, value)
        key = progress_key(run.pk)
        transaction.on_commit(lambda: cache.delete(key))
    return bool(changed)


def run_finish(*, run: BackgroundRun, result: dict | None = None, message: str | None = None) -> bool:
    """Mark a run succeeded with its ``result``; False when it was already over."""
    return _over(run, status=Status.SUCCEEDED, result=result, error="", message=message)


def run_fail(*, run: BackgroundRun, error: str, result: dict | None = None) -> bool:
    """Mark a run failed with its ``error`` (and what the page needs to show it, in ``result``).

    Called while handling the ``SoftTimeLimitExceeded`` that Celery raises at a task's soft time limit
    (worker/time_limits.py), the error says that instead of the caller's wording for an unexpected
    error: every run's work ends in ``run_fail`` from its ``except``, so this one place covers them all."""
    if isinstance(sys.exc_info()[1], SoftTimeLimitExceeded):
        error = TIME_LIMIT_REACHED
    return _over(run, status=Status.FAILED, result=result, error=str(error)[:2000], message=None)


def run_progress_read(run: BackgroundRun) -> dict[str, Any]:
    """What a progress page and the polling endpoint show: the live progress while it runs."""
    done, total, message = run.progress_done, run.progress_total, run.progress_message
    if run.status == Status.RUNNING:
        live = cache.get(progress_key(run.pk)) or {}
        done = live.get("done", done)
        total = live.get("total", total)
        message = live.get("message", message)
    percent = min(100, int(done * 100 / total)) if total else 0
    if run.status == Status.SUCCEEDED:
        percent = 100
    return {
        "id": run.pk,
        "kind": run.kind,
        "status": run.status,
        "status_label": str(run.get_status_display()),
        "finished": run.is_finished,
        "done": done,
        "total": total,
        "percent": percent,
        "message": message,
        "error": run.error,
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }
