"""Metric sources (configuration) and their backfill with progress."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from apps.core import task_names
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.models import BackgroundRun
from apps.core.validation import validate_and_save
from apps.inventory.models import Cluster
from apps.telemetry.ingest.front_doors import prometheus_ingest
from apps.telemetry.models import MetricSource

_SOURCE_FIELDS = ["cluster", "name", "kind", "url", "targets", "step_seconds", "enabled"]


def metric_source_create(
    *,
    actor: Any,
    cluster: Cluster,
    name: str,
    kind: str = MetricSource.Kind.PROMETHEUS,
    url: str = "",
    targets: list | None = None,
    step_seconds: int = 10,
    enabled: bool = True,
) -> MetricSource:
    with transaction.atomic():
        source = MetricSource(
            cluster=cluster,
            name=name,
            kind=kind,
            url=url,
            targets=targets or [],
            step_seconds=step_seconds,
            enabled=enabled,
        )
        validate_and_save(source, what="metric source")
        change_record_create(
            actor=actor, action="telemetry.source.create", obj=source, after=snapshot(source, _SOURCE_FIELDS)
        )
    return source


def metric_source_update(*, actor: Any, source: MetricSource, **changes: Any) -> MetricSource:
    unknown = set(changes) - set(_SOURCE_FIELDS)
    if unknown:
        raise ValidationFailed(f"Unknown fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        source = MetricSource.objects.select_for_update().get(pk=source.pk)
        before = snapshot(source, _SOURCE_FIELDS)
        for key, value in changes.items():
            setattr(source, key, value)
        validate_and_save(source, what="metric source")
        change_record_create(
            actor=actor,
            action="telemetry.source.update",
            obj=source,
            before=before,
            after=snapshot(source, _SOURCE_FIELDS),
        )
    return source


def metric_source_delete(*, actor: Any, source: MetricSource) -> None:
    with transaction.atomic():
        change_record_create(
            actor=actor, action="telemetry.source.delete", obj=source, before=snapshot(source, _SOURCE_FIELDS)
        )
        source.delete()


# ------------------------------------------------------------------ backfill with progress


# The BackgroundRun kind of a metric backfill, and the task that runs it.
BACKFILL_RUN_KIND = "telemetry.backfill"
BACKFILL_TASK = task_names.BACKFILL


def backfill_request(*, source: MetricSource, start: datetime, end: datetime, actor: Any) -> BackgroundRun:
    """Queue a backfill of ``[start, end)`` from a Prometheus source; a worker runs it after commit and
    publishes its progress (one hour chunk at a time). Returns the core ``BackgroundRun``: ``params``
    name the source and the window, ``result`` gets the ingest report."""
    from apps.core import runs

    if source.kind != MetricSource.Kind.PROMETHEUS or not source.url:
        raise ValidationFailed(
            f"Source {source} is not a Prometheus HTTP API; only those can be backfilled.",
            details={"source": ["needs kind prometheus and a URL"]},
        )
    if end <= start:
        raise ValidationFailed("The end must be after the start.", details={"end": ["must be after start"]})
    if end - start > timedelta(days=31):
        raise ValidationFailed(
            "Backfill at most 31 days at a time.", details={"end": ["≤ 31 days after start"]}
        )
    with transaction.atomic():
        run = runs.run_create(
            kind=BACKFILL_RUN_KIND,
            actor=actor,
            params={
                "source": source.pk,
                "source_name": str(source)[:200],
                "start": start.isoformat(),
                "end": end.isoformat(),
            },
        )
        change_record_create(
            actor=actor,
            action="telemetry.backfill_request",
            obj=run,
            after={"source": source.pk, "start": start.isoformat(), "end": end.isoformat()},
        )
        runs.run_enqueue(run=run, task=BACKFILL_TASK)
    return run


def backfill_run(*, run_id: int, actor: Any = "worker") -> BackgroundRun | None:
    """Run a queued backfill (at most once: the queued → running move is a conditional update)."""
    from django.utils.dateparse import parse_datetime

    from apps.core import runs
    from apps.telemetry.prometheus import PrometheusError

    run = runs.run_start(run_id=run_id, kind=BACKFILL_RUN_KIND)
    if run is None:
        return None
    source = MetricSource.objects.select_related("cluster").filter(pk=run.params.get("source")).first()
    if source is None:
        runs.run_fail(run=run, error="the metric source was deleted before the backfill ran")
        return run

    def progress(done: int, total: int) -> None:
        runs.run_progress(run=run, done=done, total=total)

    try:
        report = prometheus_ingest(
            url=source.url,
            start=parse_datetime(run.params["start"]),
            end=parse_datetime(run.params["end"]),
            step_s=source.step_seconds,
            source=source.label,
            cluster=source.cluster,
            actor=actor,
            progress=progress,
        )
    except (ApplicationError, PrometheusError) as exc:
        runs.run_fail(run=run, error=str(getattr(exc, "message", exc)))
    except Exception:
        runs.run_fail(run=run, error="the backfill stopped on an unexpected error; see the worker log")
        raise
    else:
        runs.run_finish(run=run, result=report.as_dict())
    run.refresh_from_db()
    return run
