"""Rollout fixtures on the small fleet of tests/jobs/conftest.py (gpu-01, gpu-02: 4 × A100 each;
npu-01: 8 × Ascend 910B3), plus telemetry written through the telemetry app's own ingest path."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.rollout import services
from apps.scheduling.services import scheduling_cycle_run
from apps.telemetry.samples import Sample
from apps.telemetry.services import samples_ingest
from tests.jobs import conftest as jobs_fixtures
from tests.jobs.conftest import submit_whole_cards

a100 = jobs_fixtures.a100
ascend = jobs_fixtures.ascend
fleet = jobs_fixtures.fleet
member_project = jobs_fixtures.member_project

SOURCE = "exporter:prod/dcgm"


@pytest.fixture
def now() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def criteria(db):
    return services.soak_criteria_create(
        actor="test",
        name="driver soak",
        min_days=1,
        max_error_events=0,
        max_temperature_c=Decimal("85"),
        max_throughput_drop_pct=Decimal("5"),
        max_lost_devices=0,
        min_telemetry_coverage_pct=Decimal("90"),
    )


def ingest_soak(
    nodes,
    *,
    start: datetime,
    end: datetime,
    util: float = 60.0,
    temp: float = 70.0,
    burst_at: datetime | None = None,
    now: datetime | None = None,
    step_s: int = 300,
) -> None:
    """One sample per card every ``step_s`` from ``start`` to ``end``, as an exporter would give them.
    ``burst_at``: from then on, each card's uncorrectable ECC counter climbs (an error burst)."""
    samples = []
    for node in nodes:
        for device in node.devices.order_by("index"):
            at = start + timedelta(seconds=60)
            ecc = 0.0
            while at <= end:
                if burst_at is not None and at >= burst_at and at <= burst_at + timedelta(minutes=30):
                    ecc += 3
                samples.append(
                    Sample(
                        at=at,
                        device_id=device.pk,
                        utilization_pct=util,
                        temperature_c=temp,
                        memory_used_mib=1000.0,
                        counters={"ecc_dbe": ecc},
                    )
                )
                at += timedelta(seconds=step_s)
    samples_ingest(samples=samples, source=SOURCE, now=now or timezone.now())


@pytest.fixture
def service(fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(
        project, user, a100, name="serve", kind="inference", image="vllm:0.6", replicas=1
    )
    assert job.pk in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    return job
