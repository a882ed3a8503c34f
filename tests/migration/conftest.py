"""A dual-track inference service on the jobs test fleet: NVIDIA A100 (source) and Ascend 910B3 (target)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.migration import services
from apps.migration.models import ServiceMetric
from apps.scheduling.services import scheduling_cycle_run
from tests.jobs.conftest import a100, ascend, fleet, member_project, submit_whole_cards  # noqa: F401  (fixtures)


def inference_job(project, user, model, name, replicas=1, schedule=True):
    job = submit_whole_cards(
        project, user, model, name=name, kind="inference", image="vllm:0.6", replicas=replicas
    )
    if schedule:
        assert job.pk in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    return job


@pytest.fixture
def plan(staff_user):
    return services.plan_create(
        actor=staff_user,
        name="Domestic 2027",
        source_vendors=["nvidia"],
        target_vendors=["huawei", "hygon"],
        validate_max_target_weight=20,
        phases=[
            {"phase": "validate", "owner": "platform team"},
            {"phase": "inference", "owner": "serving team"},
        ],
        gates=[
            {"phase": "validate", "kind": "p99_latency", "threshold": Decimal("10"), "window_days": 3},
            {"phase": "validate", "kind": "error_rate", "threshold": Decimal("0.5"), "window_days": 3},
        ],
    )


@pytest.fixture
def dual(fleet, member_project, a100, ascend, plan):  # noqa: F811
    """(service, user, project): source on A100 with 2 replicas, target on Ascend with 1."""
    user, project = member_project
    source = inference_job(project, user, a100, "chat-nvidia", replicas=2)
    target = inference_job(project, user, ascend, "chat-ascend", replicas=1)
    service = services.service_create(
        actor=user,
        plan=plan,
        name="chat",
        source_job=source,
        target_job=target,
        capacity_replicas=4,
        step_percent=10,
    )
    return service, user, project


def samples(service, *, days=3, source_p99=100, target_p99=105, target_errors=1, requests=1000, now=None):
    """Hourly windows for both tracks over the last ``days`` days (a Prometheus-like source label)."""
    now = now or timezone.now()
    rows = []
    start = now - timedelta(days=days)
    hours = days * 24
    for h in range(hours):
        when = start + timedelta(hours=h, minutes=5)
        for track, p99, errors in (("source", source_p99, 0), ("target", target_p99, target_errors)):
            rows.append(
                ServiceMetric(
                    service=service,
                    track=track,
                    window_start=when,
                    window_seconds=3600,
                    requests=requests,
                    errors=errors,
                    p99_latency_ms=Decimal(p99),
                    source="prometheus:http://prom:9090 (test fixture)",
                )
            )
    ServiceMetric.objects.bulk_create(rows)
    return rows
