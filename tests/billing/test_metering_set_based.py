"""Metering is set-based (issue 31 §3): telemetry is read per batch of allocations, not per slice, and
the batched figures are the ones ``measured_cu_hours`` gives slice by slice."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.billing.models import UsageEntry
from apps.billing.services import metering_run
from apps.telemetry.models import JobUtilization
from apps.telemetry.selectors import measured_cu_hours
from tests.fixtures.telemetry import allocate, make_job

pytestmark = pytest.mark.django_db
SHANGHAI = ZoneInfo("Asia/Shanghai")
START = dt.datetime(2026, 11, 2, 10, tzinfo=SHANGHAI)
NOW = dt.datetime(2026, 11, 3, 10, tzinfo=SHANGHAI)


def _half_card(project, device, *, hours: int = 3):
    job = make_job(project)
    allocation = allocate(
        job, device, start=START, end=START + dt.timedelta(hours=hours), profile="3g.40gb", milli=500
    )
    allocation.compute_units = Decimal("0.5000")  # coefficient 1.0 × half a card
    allocation.save(update_fields=["compute_units"])
    return job, allocation


def _windows(job, device, project, *, hour: int, busy: float, source: str) -> None:
    for i in range(12):
        JobUtilization.objects.create(
            job=job,
            device=device,
            window_start=START + dt.timedelta(hours=hour, minutes=5 * i),
            source=source,
            quality="exact",
            share=0.5,
            busy_pct=busy,
            project_id_snapshot=project.pk,
        )


def test_max_basis_takes_each_slices_measured_figure_from_one_batched_read(ledger, make_project):
    project = make_project("vision")
    devices = list(ledger["devices"].values())
    job, allocation = _half_card(project, devices[0])
    _windows(job, devices[0], project, hour=0, busy=80.0, source="prom:a")
    _windows(job, devices[0], project, hour=0, busy=30.0, source="prom:b")  # the first source counts
    _windows(job, devices[0], project, hour=2, busy=10.0, source="prom:a")
    metering_run(start=START, end=START + dt.timedelta(hours=3), basis="max", now=NOW)
    entries = list(UsageEntry.objects.filter(allocation=allocation).order_by("slice_start"))
    assert [(e.basis, e.cu_hours) for e in entries] == [
        ("max", Decimal("0.800000")),
        ("allocated", Decimal("0.500000")),
        ("allocated", Decimal("0.500000")),
    ]
    first = measured_cu_hours(allocation.pk, entries[0].slice_start, entries[0].slice_end)
    assert first == entries[0].cu_hours


def test_metering_queries_do_not_grow_with_allocations_or_hours(ledger, make_project):
    project = make_project("vision")
    devices = list(ledger["devices"].values())
    job, _one = _half_card(project, devices[0], hours=2)
    _windows(job, devices[0], project, hour=0, busy=80.0, source="prom:a")
    with CaptureQueriesContext(connection) as few:
        metering_run(start=START, end=START + dt.timedelta(hours=24), basis="max", now=NOW)
    for device in devices[1:4]:
        job, _other = _half_card(project, device, hours=20)
        _windows(job, device, project, hour=5, busy=90.0, source="prom:a")
    with CaptureQueriesContext(connection) as many:
        metering_run(start=START, end=START + dt.timedelta(hours=24), basis="max", now=NOW)
    assert UsageEntry.objects.count() == 2 + 3 * 20
    assert len(many) <= len(few)
