"""Why pending, with an ETA and a queue position among what the reader can see (issue 21).

``pending_eta(job, user)``: "after job X finishes (~14 min)". The running jobs that hold cards this job
could use (same model for a template or whole-card request; the allowed vendors for compute units),
ordered by their expected end (``started_at + expected_duration_s``); the ETA is the end of the job
whose cards, added to those freed before it, cover what this job asks for (one card per replica for a
slice or compute-unit request, ``count`` per replica for whole cards). A job of a project the reader
cannot see is named "a job of another project". None when no running job with an expected duration
holds such cards, or when all of them together free too few: then the page shows no guess.

``visible_queue_positions(user, jobs)``: 1-based positions in the scheduling order counting only the
queued jobs the reader can see (another project's hidden jobs do not push a member's number up).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from typing import Any

from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.inventory.models import Device
from apps.jobs import selectors
from apps.jobs.models import QUEUED_STATES, Allocation, Job, JobState
from apps.quotas.selectors import queue_positions


def _usable_cards(job: Job) -> Q | None:
    """A filter on ``Device`` for the cards this job could use; None for "any card"."""
    kind = job.request_kind
    if kind == Job.RequestKind.TEMPLATE and job.template_id:
        return Q(device_model_id=job.template.device_model_id)
    if kind == Job.RequestKind.WHOLE_CARDS:
        if job.device_model_id:
            return Q(device_model_id=job.device_model_id)
        q = Q()
        if job.vendor:
            q &= Q(vendor=job.vendor)
        if job.min_memory_mib:
            q &= Q(device_model__memory_mib__gte=job.min_memory_mib)
        return q
    if kind == Job.RequestKind.COMPUTE_UNITS and job.allowed_vendors:
        return Q(vendor__in=list(job.allowed_vendors))
    return None


def _cards_needed(job: Job) -> int:
    per_replica = job.count if job.request_kind == Job.RequestKind.WHOLE_CARDS else 1
    return max(1, per_replica) * max(1, job.replicas)


def pending_eta(job: Job, user, *, now: dt.datetime | None = None) -> dict[str, Any] | None:
    if job.state not in QUEUED_STATES:
        return None
    now = now or timezone.now()
    allocations = Allocation.objects.filter(
        released_at__isnull=True,
        job__state=JobState.RUNNING,
        job__started_at__isnull=False,
        job__expected_duration_s__isnull=False,
    ).exclude(job=job)
    usable = _usable_cards(job)
    if usable is not None:
        allocations = allocations.filter(device__in=Device.objects.filter(usable).values("pk"))
    cards: dict[int, set[int]] = defaultdict(set)
    for job_id, device_id in allocations.values_list("job_id", "device_id"):
        cards[job_id].add(device_id)
    if not cards:
        return None
    holders = sorted(
        Job.objects.filter(pk__in=cards).only(
            "pk", "name", "project_id", "started_at", "expected_duration_s"
        ),
        key=lambda j: (j.started_at + dt.timedelta(seconds=j.expected_duration_s), j.pk),
    )
    needed = _cards_needed(job)
    freed: set[int] = set()
    for holder in holders:
        freed |= cards[holder.pk]
        if len(freed) >= needed:
            break
    else:
        return None
    ends_at = holder.started_at + dt.timedelta(seconds=holder.expected_duration_s)
    minutes = max(1, math.ceil((ends_at - now).total_seconds() / 60))
    visible = selectors.job_list(user=user).filter(pk=holder.pk).exists()
    if visible:
        text = _("after job %(name)s finishes (~%(minutes)d min)") % {"name": holder.name, "minutes": minutes}
    else:
        text = _("after a job of another project finishes (~%(minutes)d min)") % {"minutes": minutes}
    return {
        "text": text,
        "minutes": minutes,
        "ends_at": ends_at,
        "overdue": ends_at < now,
        "job_id": holder.pk if visible else None,
        "job_name": holder.name if visible else None,
    }


def visible_queue_positions(user, jobs: list[Job]) -> dict[int, int]:
    """Positions of the queued ``jobs`` among the queued jobs ``user`` can see."""
    wanted = {job.pk for job in jobs if job.state in QUEUED_STATES}
    if not wanted:
        return {}
    # Ranked among the visible queued jobs in SQL (the same order as among all of them).
    return queue_positions(wanted, among=selectors.job_list(user=user).select_related(None))
