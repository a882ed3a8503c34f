"""Demo rollout data: a collector version that passed its soak, an Ascend firmware batch soaking, the
upgrade plan that holds them, and an autoscaling policy for the demo inference service.

Both batches' soak telemetry is synthetic (source ``simulated:demo-rollout``, quality "estimated"),
written through the telemetry ingest path and judged by the same evaluation as real data.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from apps.inventory.models import Node
from apps.jobs.models import Job
from apps.rollout import services
from apps.rollout.models import AutoscalePolicy, GrayBatch, SoakCriteria, UpgradePlan

DEMO_SOURCE = "simulated:demo-rollout"


def _criteria(actor) -> tuple[SoakCriteria, SoakCriteria]:
    default = SoakCriteria.objects.filter(
        name="Driver / firmware: 3 days"
    ).first() or services.soak_criteria_create(
        actor=actor,
        name="Driver / firmware: 3 days",
        min_days=3,
        max_error_events=0,
        max_temperature_c=Decimal("85"),
        max_throughput_drop_pct=Decimal("5"),
        max_lost_devices=0,
    )
    quick = SoakCriteria.objects.filter(name="Node agents: 1 day").first() or services.soak_criteria_create(
        actor=actor,
        name="Node agents: 1 day",
        min_days=1,
        max_error_events=0,
        max_temperature_c=Decimal("85"),
        max_throughput_drop_pct=None,
        max_lost_devices=0,
    )
    return default, quick


def _synthetic_soak(node: Node, *, start, end) -> None:
    from apps.telemetry.models import Quality
    from apps.telemetry.samples import Sample
    from apps.telemetry.services import samples_ingest

    samples = []
    for device in node.devices.exclude(health__in=["retired", "lost"]).order_by("index"):
        at, i = start + timedelta(seconds=30), 0
        while at <= end:
            samples.append(
                Sample(
                    at=at,
                    device_id=device.pk,
                    utilization_pct=45.0 + (i * 7 + device.index * 11) % 30,
                    temperature_c=58.0 + (i * 3 + device.index) % 9,
                )
            )
            at += timedelta(minutes=5)
            i += 1
    samples_ingest(samples=samples, source=DEMO_SOURCE, quality=Quality.ESTIMATED, actor="demo-loader")


def load(*, actor, stdout) -> dict[str, int]:
    now = timezone.now()
    created = {"batches": 0, "policies": 0}
    default, quick = _criteria(actor)
    plan = UpgradePlan.objects.filter(name="2026-Q4 node stack").first() or services.upgrade_plan_create(
        actor=actor,
        name="2026-Q4 node stack",
        description="dcgm-exporter 3.3.9, then the Ascend 24.1.rc3 firmware (no scheduler change in this plan).",
    )

    collector_node = Node.objects.filter(name="a100-pcie-01").first()
    if collector_node is not None and not GrayBatch.objects.filter(slug="dcgm-exporter-3-3-9").exists():
        batch = services.batch_create(
            actor=actor,
            name="dcgm-exporter 3.3.9",
            slug="dcgm-exporter-3-3-9",
            kind="collector",
            target_version="3.3.9-3.6.1",
            description="New collector on one A100 node before the whole fleet.",
            criteria=quick,
            nodes=[collector_node],
        )
        services.upgrade_wave_create(actor=actor, plan=plan, batch=batch)
        start = now - timedelta(hours=26)
        services.batch_soak_start(batch=batch, actor=actor, now=start)
        _synthetic_soak(collector_node, start=start, end=now - timedelta(minutes=1))
        result = services.batch_evaluate(batch=batch, actor=actor, now=now)
        stdout.write(f"rollout: {batch.name} soak {result.verdict}")
        created["batches"] += 1

    ascend_node = Node.objects.filter(name="ascend-910b-02").first()
    if ascend_node is not None and not GrayBatch.objects.filter(slug="ascend-fw-24-1-rc3").exists():
        batch = services.batch_create(
            actor=actor,
            name="Ascend firmware 24.1.rc3",
            slug="ascend-fw-24-1-rc3",
            kind="firmware",
            target_version="24.1.rc3",
            description="Firmware for the 910B cards; soaking three days on one node.",
            criteria=default,
            nodes=[ascend_node],
        )
        services.upgrade_wave_create(actor=actor, plan=plan, batch=batch)
        start = now - timedelta(hours=20)
        services.batch_soak_start(batch=batch, actor=actor, now=start)
        # 20 hours of soak telemetry (synthetic, marked as such): the soak chart draws every hour.
        _synthetic_soak(ascend_node, start=start, end=now - timedelta(minutes=1))
        services.batch_evaluate(batch=batch, actor=actor, now=now)
        created["batches"] += 1

    service = Job.objects.filter(kind=Job.Kind.INFERENCE, name="bert-serving").first()
    if service is not None and not AutoscalePolicy.objects.filter(job=service).exists():
        services.autoscale_policy_create(actor=actor, job=service, min_replicas=1, max_replicas=4)
        created["policies"] += 1
    stdout.write(f"rollout: {created['batches']} gray batches, {created['policies']} autoscaling policies")
    return created
