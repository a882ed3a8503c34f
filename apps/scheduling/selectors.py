"""Scheduling reads: the one "why pending?" answer for a queued job.

It joins what three layers know: the latest decision trace (scheduling: device fit, topology, the
quota step the cycle recorded), the quota verdict now (the quota book's public API,
``quota_context().verdict_now``) and the queue position (``apps.quotas.selectors.queue_positions``:
priority, then fair share, then age).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from apps.accounts.selectors import is_platform_staff
from apps.core.stored_text import localize
from apps.jobs.models import QUEUED_STATES, Job
from apps.quotas.book import quota_context
from apps.quotas.selectors import queue_positions, quotas_configured
from apps.scheduling.engine_texts import explanation_for_reader
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
            if user is not None:  # without the nodes this reader cannot see (engine_texts)
                placement_reason = explanation_for_reader(placement_reason, staff=is_platform_staff(user))
    if quota_reason is None and quotas_configured():
        quota_reason = quota_context().verdict_now(job)
    if user is not None:
        from apps.scheduling import eta

        position = eta.visible_queue_positions(user, [job]).get(job.pk)
        estimate = eta.pending_eta(job, user)
    else:
        position, estimate = queue_positions([job.pk]).get(job.pk), None
    # In the reader's language (the API's ``why_pending`` is read as the pages are): the stored English
    # of the trace and the quota book through apps.core.stored_text, the rest through gettext.
    reasons = []
    if quota_reason:
        reasons.append(_("quota: %(reason)s") % {"reason": localize(quota_reason)})
    if placement_reason:
        reasons.append(localize(placement_reason))
    if position is not None:
        reasons.append(_("position %(position)s in the queue") % {"position": position})
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
