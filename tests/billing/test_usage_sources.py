"""What billing reads from below: guaranteed CU-hours from quotas, measured CU-hours from telemetry."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from apps.quotas.models import Quota
from apps.quotas.selectors import guaranteed_cu_hours
from apps.telemetry.models import JobUtilization
from apps.telemetry.selectors import measured_cu_hours
from tests.fixtures.telemetry import allocate, make_job

pytestmark = pytest.mark.django_db
SHANGHAI = ZoneInfo("Asia/Shanghai")


def test_guaranteed_cu_hours_count_each_quota_for_the_hours_it_existed(make_project):
    project = make_project("vision")
    assert guaranteed_cu_hours(project=project, month=dt.date(2026, 11, 1)) is None
    q = Quota.objects.create(project=project, resource_class="any", guaranteed_cu=Decimal("2"))
    Quota.objects.filter(pk=q.pk).update(created_at=dt.datetime(2026, 10, 20, tzinfo=SHANGHAI))
    # November has 30 days = 720 hours: 2 CU × 720 h.
    assert guaranteed_cu_hours(project=project, month=dt.date(2026, 11, 1)) == Decimal("1440.0000")
    # Created on Oct 20 (Shanghai midnight): 12 days of October.
    assert guaranteed_cu_hours(project=project, month=dt.date(2026, 10, 1)) == Decimal("576.0000")


def test_measured_cu_hours_come_from_the_attributed_busy_points(ledger, make_project):
    project = make_project("vision")
    job = make_job(project)
    device = next(iter(ledger["devices"].values()))
    start = dt.datetime(2026, 11, 2, 10, tzinfo=SHANGHAI)
    allocation = allocate(job, device, start=start, milli=500, profile="3g.40gb")
    allocation.compute_units = Decimal("0.5000")  # coefficient 1.0 × half a card
    allocation.save(update_fields=["compute_units"])
    assert measured_cu_hours(allocation.pk, start, start + dt.timedelta(hours=1)) is None
    for i in range(12):  # one hour of 5-minute windows at 80 busy points
        JobUtilization.objects.create(
            job=job,
            device=device,
            window_start=start + dt.timedelta(minutes=5 * i),
            source="prom:a",
            quality="exact",
            share=0.5,
            busy_pct=80.0,
            project_id_snapshot=project.pk,
        )
        JobUtilization.objects.create(  # a second source for the same card is not added on top
            job=job,
            device=device,
            window_start=start + dt.timedelta(minutes=5 * i),
            source="prom:b",
            quality="exact",
            share=0.5,
            busy_pct=80.0,
            project_id_snapshot=project.pk,
        )
    # coefficient 1.0 × 80 % of the card × 1 hour
    assert measured_cu_hours(allocation.pk, start, start + dt.timedelta(hours=1)) == Decimal("0.800000")
