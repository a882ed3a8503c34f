"""Demo migration data: one plan (NVIDIA → Ascend / Hygon DCU, seed 004 §6) with services at
different phases, so a new user sees the cockpit alive.

The services' tracks are real inference Jobs on the demo fleet, scheduled by the real cycle and
shifted through the real services (cards allocated, Deployments pushed through the outbox). Their
request metrics are synthetic (source ``simulated:demo-migration``), written through the ingestion
service and judged by the same gates as real data. The action history is spread over the past weeks
so the forecast has a trend to extend. Idempotent; runs on SQLite as well as PostgreSQL.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db.models import F
from django.utils import timezone

from apps.accounts.models import Project
from apps.catalog.models import DeviceModel
from apps.core.errors import ApplicationError
from apps.jobs.models import Job, JobEvent
from apps.migration import services
from apps.migration.models import MigratedService, MigrationAction, MigrationPlan
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.services import scheduling_cycle_run

PLAN_NAME = "国产化迁移 2027: NVIDIA → Ascend / DCU"
DEMO_SOURCE = "simulated:demo-migration"
# (name, project, user, source model, target model, capacity, steps: list of ("shift", weight) or
#  ("promote",), base p99 ms, target p99 factor)
SERVICES = [
    (
        "embedding-serving",
        "online-inference",
        "bob",
        "T4",
        "Ascend 910B3",
        1,
        [("shift", 10)],
        120,
        1.06,
    ),
    (
        "ocr-serving",
        "online-inference",
        "bob",
        "T4",
        "DCU Z100/Z100L",
        2,
        [("shift", 10), ("shift", 20), ("promote",), ("shift", 35), ("shift", 50)],
        210,
        1.04,
    ),
    (
        "asr-serving",
        "online-inference",
        "bob",
        "T4",
        "DCU Z100/Z100L",
        2,
        [("shift", 20), ("promote",), ("shift", 60), ("shift", 100), ("promote",)],
        340,
        0.97,
    ),
]
TRAINING = ("resnet50-retrain", "vision", "alice", "A100 80GB SXM4", "Ascend 910B3")


def _plan(actor) -> MigrationPlan:
    today = timezone.localdate()
    return services.plan_create(
        actor=actor,
        name=PLAN_NAME,
        description=(
            "Seed 004 §6: validate non-critical inference on Ascend / DCU in dual track, migrate inference, "
            "then training with accuracy checks, then keep NVIDIA as a CUDA fallback."
        ),
        source_vendors=["nvidia"],
        target_vendors=["huawei", "hygon"],
        validate_max_target_weight=20,
        fallback_cards=4,
        phases=[
            {
                "phase": "validate",
                "target_start": today - timedelta(days=45),
                "target_end": today + timedelta(days=15),
                "owner": "Platform team 平台组",
            },
            {
                "phase": "inference",
                "target_start": today - timedelta(days=20),
                "target_end": today + timedelta(days=70),
                "owner": "Online serving 在线推理组",
            },
            {
                "phase": "training",
                "target_start": today + timedelta(days=30),
                "target_end": today + timedelta(days=180),
                "owner": "Training infra 训练平台组",
            },
            {
                "phase": "reduce",
                "target_start": today + timedelta(days=150),
                "target_end": today + timedelta(days=240),
                "owner": "Platform team 平台组",
            },
        ],
        gates=[
            {"phase": "validate", "kind": "p99_latency", "threshold": Decimal("15"), "window_days": 3},
            {"phase": "validate", "kind": "error_rate", "threshold": Decimal("0.5"), "window_days": 3},
            {"phase": "validate", "kind": "accuracy", "threshold": Decimal("0.5"), "metric": "top1"},
            {"phase": "inference", "kind": "p99_latency", "threshold": Decimal("10"), "window_days": 7},
            {"phase": "inference", "kind": "error_rate", "threshold": Decimal("0.3"), "window_days": 7},
            {"phase": "training", "kind": "accuracy", "threshold": Decimal("0.3"), "metric": "top1"},
        ],
    )


def _job(project, user, name, model, kind, replicas) -> Job:
    return job_submit(
        project=project,
        actor=user,
        name=name,
        kind=kind,
        image="registry.local/demo-serving:latest"
        if kind == "inference"
        else "registry.local/demo-train:latest",
        request_kind="whole_cards",
        device_model=model,
        count=1,
        replicas=replicas,
    )


def _metrics(
    service: MigratedService, *, base_p99: int, factor: float, target_share: float, now, days: int = 14
) -> None:
    """Hourly windows for both tracks: a daily load curve split by the traffic weights (a fallback
    track still answers a trickle), the target's latency slightly off the source's."""
    samples = []
    start = (now - timedelta(days=days)).replace(minute=0, second=0, microsecond=0)
    for h in range(days * 24):
        at = start + timedelta(hours=h)
        load = 0.55 + 0.45 * math.sin(math.pi * ((at.hour + 16) % 24) / 24)
        for track, p99, error_ppm, share in (
            ("source", base_p99, 600, max(0.02, 1 - target_share)),
            ("target", base_p99 * factor, 900, max(0.02, target_share)),
        ):
            requests = int(3600 * 40 * load * share)
            wobble = 1 + 0.04 * math.sin(h * 0.7 + (track == "target"))
            samples.append(
                {
                    "track": track,
                    "window_start": at.isoformat(),
                    "window_seconds": 3600,
                    "requests": requests,
                    "errors": requests * error_ppm // 1_000_000,
                    "p99_latency_ms": str(round(Decimal(p99 * wobble * (0.9 + 0.2 * load)), 3)),
                    "source": DEMO_SOURCE,
                }
            )
    services.service_metrics_ingest(service=service, samples=samples, actor="demo-loader")


def _backdate(service: MigratedService, now) -> None:
    """Spread the service's history over the past weeks (the demo made it all just now)."""
    actions = list(service.actions.order_by("id").values_list("pk", flat=True))
    first = now - timedelta(days=6 * len(actions))
    for i, pk in enumerate(actions):
        MigrationAction.objects.filter(pk=pk).update(created_at=first + timedelta(days=6 * i))
    last_promote = service.actions.filter(kind="promote").order_by("-created_at").first()
    MigratedService.objects.filter(pk=service.pk).update(
        created_at=first,
        phase_changed_at=last_promote.created_at if last_promote else first,
    )


def load(*, actor, stdout) -> dict:
    if MigrationPlan.objects.filter(name=PLAN_NAME).exists():
        stdout.write("migration: demo plan already there")
        return {"services": 0}
    users = get_user_model().objects
    plan = _plan(actor)
    now = timezone.now()
    pending = []
    for name, slug, username, source_model, target_model, capacity, steps, p99, factor in SERVICES:
        project = Project.objects.filter(slug=slug).first()
        user = users.filter(username=username).first()
        models = [DeviceModel.objects.filter(name=n).first() for n in (source_model, target_model)]
        if project is None or user is None or None in models:
            continue
        source = _job(project, user, f"{name}-nvidia", models[0], "inference", capacity)
        target = _job(project, user, f"{name}-domestic", models[1], "inference", 1)
        pending.append((name, project, user, source, target, capacity, steps, p99, factor))
    scheduling_cycle_run(actor="scheduler")
    made = 0
    for name, _project, user, source, target, capacity, steps, p99, factor in pending:
        source.refresh_from_db()
        target.refresh_from_db()
        service = services.service_create(
            actor=user, plan=plan, name=name, source_job=source, target_job=target, capacity_replicas=capacity
        )
        final = [step[1] for step in steps if step[0] == "shift"][-1]
        _metrics(service, base_p99=p99, factor=factor, target_share=final / 100, now=now)
        try:
            for step in steps:
                if step[0] == "shift":
                    services.service_shift(service=service, actor=user, target_weight=step[1], reason="demo")
                else:
                    services.service_promote(service=service, actor=user, reason="demo: gates passed")
        except ApplicationError as exc:  # a smaller fleet: the service stays where it got to
            stdout.write(f"migration: {name} stopped early: {exc.message}")
        _backdate(service, now)
        services.service_gates_evaluate(service=service, actor=actor)
        made += 1
    made += _training(plan, now, stdout)
    _meter(plan, now)
    stdout.write(f"migration: plan {plan.name!r} with {made} services")
    return {"services": made}


def _meter(plan: MigrationPlan, now) -> None:
    """Give the tracks' live cards the same 14 days as their synthetic metrics (within the open month),
    and meter them into the ledger, so cost per 1,000 requests has real ledger figures."""
    from apps.billing import services as billing
    from apps.jobs.models import Allocation

    since = max(now - timedelta(days=14), billing.month_bounds(billing.current_month())[0])
    since = billing.floor_hour(since)
    jobs = [pk for s in plan.services.all() for pk in (s.source_job_id, s.target_job_id)]
    # The whole history of each job moves back by the same amount (submitted, events, started), so
    # no job starts before it was submitted (issue 29 §9: "Started 00:00" on a job submitted later).
    for job in Job.objects.filter(pk__in=jobs, started_at__gt=since):
        shift = job.started_at - since
        Job.objects.filter(pk=job.pk).update(created_at=F("created_at") - shift, started_at=since)
        JobEvent.objects.filter(job=job).update(created_at=F("created_at") - shift)
        Allocation.objects.filter(job=job, released_at__isnull=True).update(
            started_at=F("started_at") - shift
        )
    billing.metering_run(start=since, end=now, actor="demo-loader")


def _training(plan: MigrationPlan, now, stdout) -> int:
    name, slug, username, source_model, target_model = TRAINING
    project = Project.objects.filter(slug=slug).first()
    user = get_user_model().objects.filter(username=username).first()
    models = [DeviceModel.objects.filter(name=n).first() for n in (source_model, target_model)]
    if project is None or user is None or None in models:
        return 0
    source = _job(project, user, f"{name}-nvidia", models[0], "training", 1)
    target = _job(project, user, f"{name}-ascend", models[1], "training", 1)
    service = services.service_create(
        actor=user,
        plan=plan,
        name=name,
        kind="training",
        source_job=source,
        target_job=target,
        capacity_replicas=1,
    )
    for track, value, job, days_ago in (
        ("source", "76.130", source, 20),
        ("target", "75.910", target, 18),
        ("target", "75.980", target, 3),
    ):
        services.accuracy_eval_record(
            service=service,
            actor=user,
            track=track,
            metric="top1",
            value=value,
            dataset="ImageNet-1k val",
            source=f"demo: evaluation run of job {job.pk} (synthetic figure)",
            measured_at=now - timedelta(days=days_ago),
        )
    try:
        services.service_promote(service=service, actor=user, reason="demo: accuracy within tolerance")
        services.service_shift(service=service, actor=user, target_weight=30, reason="demo: 30 % of new runs")
    except ApplicationError as exc:
        stdout.write(f"migration: {name} stopped early: {exc.message}")
    _backdate(service, now)
    services.service_gates_evaluate(service=service, actor="demo-loader")
    return 1
