"""Demo billing: rate cards, last month's usage for every demo project, metered and closed.

The demo's live jobs were only just scheduled, so last month gets its own finished jobs and released
allocations on the demo fleet (real Job and Allocation rows), which are metered into the ledger and
closed into finalized bills. The open month is metered up to the last full hour. Idempotent, and it
runs on SQLite as well as PostgreSQL.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Project
from apps.billing import services
from apps.billing.models import BillingPeriod, RateCard
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.inventory.models import Device
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.invariants import AllocationInterval, allocation_capacity_violations

# Demo prices (CNY per compute-unit-hour): a platform default and two per-model cards. They are
# illustrative numbers for the demo, not market prices.
RATE_CARDS = [
    ("Platform default 平台默认", None, Decimal("12.0000")),
    ("A100 80GB SXM4 list price", "A100 80GB SXM4", Decimal("15.0000")),
    ("Ascend 910B3 domestic incentive 国产化优惠", "Ascend 910B3", Decimal("9.5000")),
]
# (project, job name, kind, device model, template profile or None, cards, days of the month
#  [(first day, hours per day, days)])
HISTORY = [
    ("vision", "resnet50-train", "training", "A100 80GB SXM4", "3g.40gb", 2, [(3, 24, 5), (17, 10, 4)]),
    ("llm-train", "llama-pretrain", "training", "A100 80GB SXM4", None, 8, [(6, 24, 3)]),
    ("llm-train", "qwen-finetune-ascend", "finetune", "Ascend 910B3", None, 2, [(12, 24, 2)]),
    ("bi-analytics", "nightly-etl", "batch", "T4", None, 1, [(1, 4, 28)]),
    ("online-inference", "bert-serving", "inference", "T4", None, 2, [(1, 24, 28)]),
]


def _rate_cards(actor) -> int:
    created = 0
    start = services.previous_month(services.current_month())
    start = services.previous_month(start)
    for name, model_name, price in RATE_CARDS:
        if RateCard.objects.filter(name=name).exists():
            continue
        model = DeviceModel.objects.filter(name=model_name).first() if model_name else None
        if model_name and model is None:
            continue
        services.rate_card_create(
            actor=actor,
            name=name,
            scope=RateCard.Scope.DEVICE_MODEL if model else RateCard.Scope.DEFAULT,
            device_model=model,
            price_per_cu_hour=price,
            effective_from=start,
            notes="demo price",
        )
        created += 1
    return created


def _windows(start, runs) -> list[tuple]:
    """The [begin, end) of every run of a history job: whole days from midnight, shorter runs from 8:00."""
    windows = []
    for first_day, hours, days in runs:
        for day in range(days):
            begin = start + timedelta(days=first_day - 1 + day, hours=8 if hours < 24 else 0)
            windows.append((begin, begin + timedelta(hours=hours)))
    return windows


def _free_devices(model, cards: int, windows, *, month, **shape) -> list[Device] | None:
    """``cards`` distinct cards of ``model`` that can hold an allocation of ``shape`` over every window
    next to what the month already holds (the capacity invariant, apps.scheduling.invariants), or None.
    History never double-books a card, so the demo's finalized bills only charge possible usage."""
    start, end = services.month_bounds(month)
    chosen: list[Device] = []
    candidates = (
        Device.objects.filter(device_model=model)
        .exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST])
        .select_related("node")
        .order_by("node__name", "index")
    )
    for device in candidates:
        planned = [
            AllocationInterval(allocation_id=-(n + 1), device_id=device.pk, start=begin, end=finish, **shape)
            for n, (begin, finish) in enumerate(windows)
        ]
        if not allocation_capacity_violations(start=start, end=end, device_ids=[device.pk], extra=planned):
            chosen.append(device)
            if len(chosen) == cards:
                return chosen
    return None


def _history(month, actor) -> int:
    """Finished jobs with released allocations in ``month``; returns how many allocations it made."""
    start, _end = services.month_bounds(month)
    made = 0
    for slug, name, kind, model_name, profile, cards, runs in HISTORY:
        project = Project.objects.filter(slug=slug).first()
        model = DeviceModel.objects.filter(name=model_name).first()
        if project is None or model is None:
            continue
        job_name = f"{name} ({month:%Y-%m})"
        if Job.objects.filter(project=project, name=job_name).exists():
            continue
        template = None
        if profile:
            template = ComputeTemplate.objects.filter(device_model=model, partition_profile=profile).first()
            if template is None:
                continue
        milli = int(template.compute_share * 10) if template else 1000
        memory = template.memory_mib if template else (model.memory_mib or 1024)
        isolation = template.isolation if template else "hard"
        windows = _windows(start, runs)
        devices = _free_devices(
            model,
            cards,
            windows,
            month=month,
            memory_mib=memory,
            compute_milli=milli,
            isolation=isolation,
            whole_card=template is None,
        )
        if devices is None:
            continue
        coefficient = coefficients_on([model.pk], month).get(model.pk, Decimal(0))
        units = (coefficient * milli / 1000).quantize(Decimal("0.0001"))
        first = start + timedelta(days=runs[0][0] - 1)
        job = Job.objects.create(
            project=project,
            name=job_name,
            kind=kind,
            image="registry.local/demo:latest",
            request_kind=Job.RequestKind.TEMPLATE if template else Job.RequestKind.WHOLE_CARDS,
            template=template,
            device_model=None if template else model,
            count=cards,
            state=JobState.SUCCEEDED,
            state_reason="demo: last month's usage",
            started_at=first,
            finished_at=first,
        )
        for attempt, (begin, finish) in enumerate(windows):
            for replica, device in enumerate(devices):
                Allocation.objects.create(
                    job=job,
                    device=device,
                    node=device.node,
                    replica=replica,
                    attempt=attempt,
                    whole_card=template is None,
                    memory_mib=memory,
                    compute_milli=milli,
                    isolation=isolation,
                    partition_profile=template.partition_profile if template else "",
                    compute_units=units,
                    trace_id=uuid.uuid4(),
                    started_at=begin,
                    released_at=finish,
                    release_reason="succeeded",
                )
                made += 1
        # Submitted when it first ran (created_at is set on insert; issue 29 §9).
        Job.objects.filter(pk=job.pk).update(created_at=first, finished_at=windows[-1][1])
    return made


def load(*, actor, stdout) -> dict:
    month = services.previous_month(services.current_month())
    with transaction.atomic():
        cards = _rate_cards(actor)
        allocations = _history(month, actor)
    start, end = services.month_bounds(month)
    metered = services.metering_run(start=start, end=end, actor=actor)
    period = BillingPeriod.objects.filter(month=month).first()
    if period is None or period.state != BillingPeriod.State.CLOSED:
        period = services.month_close(month=month, actor=actor)
    current = services.metering_run(start=end, end=timezone.now(), actor=actor)
    summary = {
        "rate_cards": cards,
        "allocations": allocations,
        "entries": metered.created + current.created,
        "month": period.label,
        "bills": period.bills.count(),
    }
    stdout.write(
        f"billing: {summary['rate_cards']} rate cards, {summary['allocations']} past allocations, "
        f"{summary['entries']} ledger entries; {summary['month']} closed with {summary['bills']} bills"
    )
    return summary
