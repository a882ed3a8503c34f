"""An inference service scaled from its measured utilization: telemetry → policy → inference_scale →
cards allocated / released, Deployment pushed, every change a ScaleDecision."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.clusters.models import PushAction
from apps.core.models import ChangeRecord
from apps.jobs.models import Allocation
from apps.rollout import services
from apps.rollout.models import AutoscalePolicy, ScaleDecision
from apps.telemetry.samples import Sample
from apps.telemetry.services import samples_ingest
from tests.fixtures.rollout import SOURCE

pytestmark = pytest.mark.django_db


def busy(job, util: float, *, start, end, now) -> None:
    """The service's cards report ``util`` every minute from ``start`` to ``end``."""
    devices = sorted(
        set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("device_id", flat=True))
    )
    samples = []
    at = start
    while at <= end:
        samples += [Sample(at=at, device_id=d, utilization_pct=util) for d in devices]
        at += timedelta(minutes=1)
    samples_ingest(samples=samples, source=SOURCE, now=now)


def deployment_replicas(job) -> int:
    action = PushAction.objects.filter(job=job, kind="Deployment").order_by("-seq").first()
    return action.object["spec"]["replicas"]


def active_replicas(job) -> int:
    return len(
        set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("replica", flat=True))
    )


def test_sustained_load_scales_the_service_up_then_quiet_scales_it_down(service):
    policy = services.autoscale_policy_create(actor="test", job=service, max_replicas=3, cooldown_s=600)
    t0 = timezone.now()

    # Not enough measured yet: it holds and says why.
    assert services.autoscale_evaluate(policy=policy, now=t0 + timedelta(minutes=1)) is None
    policy.refresh_from_db()
    assert policy.last_reason

    t1 = t0 + timedelta(minutes=17)
    busy(service, 95.0, start=t0 + timedelta(minutes=1), end=t1 - timedelta(minutes=1), now=t1)
    decision = services.autoscale_evaluate(policy=policy, now=t1)
    assert decision is not None
    assert (decision.action, decision.from_replicas, decision.to_replicas, decision.reached_replicas) == (
        "up",
        1,
        2,
        2,
    )
    assert decision.up_window_pct > 80 and not decision.error
    service.refresh_from_db()
    assert service.replicas == 2 and active_replicas(service) == 2
    assert deployment_replicas(service) == 2
    assert ChangeRecord.objects.filter(action="autoscale.decision", object_id=str(service.pk)).count() == 1

    # Still busy, but cooling down: no second change.
    assert services.autoscale_evaluate(policy=policy, now=t1 + timedelta(minutes=2)) is None
    assert ScaleDecision.objects.count() == 1

    # Quiet for 40 minutes after the change: one replica goes.
    t2 = t1 + timedelta(minutes=45)
    busy(service, 5.0, start=t1 + timedelta(minutes=1), end=t2 - timedelta(minutes=1), now=t2)
    decision = services.autoscale_evaluate(policy=policy, now=t2)
    assert decision is not None
    assert (decision.action, decision.from_replicas, decision.reached_replicas) == ("down", 2, 1)
    service.refresh_from_db()
    assert service.replicas == 1 and active_replicas(service) == 1
    assert deployment_replicas(service) == 1
    assert AutoscalePolicy.objects.get().last_scaled_at == t2


def test_a_full_cluster_is_recorded_as_a_decision_with_the_error(service, fleet):
    from apps.inventory.models import Node

    # Only the service's own node stays usable, and it is full once the service holds a card.
    node_id = Allocation.objects.filter(job=service).values_list("node_id", flat=True).first()
    Node.objects.exclude(pk=node_id).update(status="maintenance")
    from apps.inventory.models import Device

    Device.objects.filter(node_id=node_id).exclude(
        pk__in=Allocation.objects.filter(job=service).values("device_id")
    ).update(pool_status="quarantine")
    policy = services.autoscale_policy_create(actor="test", job=service, max_replicas=3)
    t0 = timezone.now()
    t1 = t0 + timedelta(minutes=17)
    busy(service, 95.0, start=t0 + timedelta(minutes=1), end=t1 - timedelta(minutes=1), now=t1)
    decision = services.autoscale_evaluate(policy=policy, now=t1)
    assert decision.reached_replicas == 1 and decision.to_replicas == 2
    assert "no room" in decision.error
    policy.refresh_from_db()
    assert policy.last_scaled_at is None  # nothing changed: no cooldown starts


def test_the_beat_task_runs_every_enabled_policy(service):
    from worker.tasks.rollout import autoscale_task

    services.autoscale_policy_create(actor="test", job=service, max_replicas=3)
    assert autoscale_task.apply().get() == {"evaluated": 1, "scaled": 0, "errors": 0}
