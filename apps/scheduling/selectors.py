"""Scheduling reads: the one "why pending?" answer for a queued job.

It joins what three layers know: the latest decision trace (scheduling: device fit, topology, the
quota step the cycle recorded), the quota verdict now (the quota book's public API,
``quota_context().verdict_now``) and the queue position (``apps.quotas.selectors.queue_positions``:
priority, then fair share, then age).
"""

from __future__ import annotations

from typing import Any

from apps.jobs.models import QUEUED_STATES, Job
from apps.quotas.book import quota_context
from apps.quotas.selectors import queue_positions, quotas_configured
from apps.scheduling.models import DecisionTrace


def why_pending(job: Job, user=None) -> dict[str, Any]:
    """One answer for a queued job: the quota verdict, device fit / topology from the latest trace, and
    the queue position. Empty ``reasons`` when the job is not queued. With ``user``, the position counts
    only the queued jobs that user can see and the answer has an ETA (``apps.scheduling.eta``)."""
    if job.state not in QUEUED_STATES:
        return {"queued": False, "reasons": [], "quota": None, "placement": None, "queue_position": None}
    trace = (
        DecisionTrace.objects.filter(job=job)
        .order_by("-created_at", "-id")
        .only("explanation", "steps", "outcome")
        .first()
    )
    quota_reason = None
    quota_data = None
    placement_reason = None
    if trace is not None:
        for step in trace.steps or []:
            if isinstance(step, dict) and step.get("tier") == "quota":
                quota_reason, quota_data = step.get("message"), step.get("data")
        if trace.outcome in (
            DecisionTrace.Outcome.PENDING,
            DecisionTrace.Outcome.CONFLICT,
        ) and not (trace.explanation or "").startswith("quota:"):
            placement_reason = trace.explanation
    if quota_reason is None and quotas_configured():
        quota_reason = quota_context().verdict_now(job)
    if user is not None:
        from apps.scheduling import eta

        position = eta.visible_queue_positions(user, [job]).get(job.pk)
        estimate = eta.pending_eta(job, user)
    else:
        position, estimate = queue_positions([job.pk]).get(job.pk), None
    reasons = [r for r in (quota_reason and f"quota: {quota_reason}", placement_reason) if r]
    if position is not None:
        reasons.append(f"position {position} in the queue")
    if estimate is not None:
        reasons.append(estimate["text"])
    return {
        "queued": True,
        "reasons": reasons,
        "quota": quota_reason,
        "quota_data": quota_data,
        "placement": placement_reason,
        "queue_position": position,
        "eta": estimate,
        "text": "; ".join(reasons),
    }
