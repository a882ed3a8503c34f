"""Benchmark runs: a harness's measured throughput on a node, recorded (and fed to the benchmark library)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.benchlib.services import measurement_from_benchmark_run
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import ValidationFailed
from apps.core.validation import validate
from apps.rollout.models import (
    BenchmarkRun,
)
from apps.rollout.services.stages import _set_fields

RUN_FIELDS = ("name", "node", "batch", "job", "throughput", "unit", "measured_at", "source", "profile")


@transaction.atomic
def benchmark_run_record(*, actor, **fields: Any) -> BenchmarkRun:
    """Record a measured benchmark run (posted by the benchmark harness)."""
    run = BenchmarkRun()
    _set_fields(run, fields, RUN_FIELDS)
    if run.measured_at is None:
        run.measured_at = timezone.now()
    if run.measured_at and run.measured_at > timezone.now() + timedelta(minutes=5):
        raise ValidationFailed(
            _("a benchmark run cannot be measured in the future"), details={"measured_at": ["future"]}
        )
    validate(run, what="benchmark run")
    if run.batch_id and not run.batch.nodes.filter(pk=run.node_id).exists():
        raise ValidationFailed(
            _("node %(node)s is not in batch %(batch)s") % {"node": run.node.name, "batch": run.batch.name},
            details={"node": [run.node.name]},
        )
    run.save()
    if run.profile_id:  # the same figure in the benchmark library (apps.benchlib)
        run.measurement = measurement_from_benchmark_run(run, profile=run.profile)
        run.save(update_fields=["measurement"])
    change_record_create(
        actor=actor, action="benchmarkrun.record", obj=run, after=snapshot(run, list(RUN_FIELDS))
    )
    return run
