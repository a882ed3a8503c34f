"""The job page: its live sections (reason, actions, runbook, facts, why, allocations, timeline), the
pod panel, cancel and the fault runbook.

The utilization curve and the per-card curves come from telemetry (``apps.telemetry.job_charts``).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from apps.accounts.selectors import is_platform_staff, user_role
from apps.clusters.pod_report import job_pod_report
from apps.core import live as live_sections
from apps.core.errors import ApplicationError
from apps.inventory.models import Device
from apps.jobs import selectors
from apps.jobs.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    QUEUED_STATES,
    Allocation,
    Job,
    JobState,
)
from apps.jobs.views.common import CANCEL_ROLES, STATE_TONES, _device_label, score_text
from apps.scheduling import lifecycle
from apps.scheduling.engine_texts import TOPOLOGY_LABELS, explanation_for_reader
from apps.scheduling.faults import runbook as runbook_entries
from apps.scheduling.faults import runbook_entry
from apps.scheduling.models import DecisionTrace
from apps.scheduling.resource_requests import (
    request_describe,
)
from apps.scheduling.selectors import why_pending
from apps.telemetry.job_charts import job_card_curves, job_utilization_chart

# The log tail of an active job is fetched again this often (seconds).
POD_REFRESH_S = 10


def _placement_rows(placement: dict | None) -> list[dict]:
    """The trace's placement JSON as rows per node and replica, each card with its label and UUID."""
    if not placement:
        return []
    parts = placement.get("parts") or []
    ids = set()
    for part in parts:
        for device in part.get("devices") or []:
            try:
                ids.add(int(device.get("device_id")))
            except (TypeError, ValueError):
                continue
    known = {
        row["pk"]: row for row in Device.objects.filter(pk__in=ids).values("pk", "vendor", "index", "uuid")
    }
    rows = []
    for part in parts:
        cards = []
        for device in part.get("devices") or []:
            try:
                row = known.get(int(device.get("device_id")), {})
            except (TypeError, ValueError):
                row = {}
            cards.append(
                {
                    "label": _device_label(row.get("vendor", ""), device.get("index", row.get("index", 0))),
                    "uuid": row.get("uuid", ""),
                    "whole": device.get("whole", False),
                    "memory_mib": device.get("memory_mib") or 0,
                    "compute_pct": round((device.get("compute") or 0) / 10, 1),
                    "isolation": device.get("isolation", ""),
                }
            )
        rows.append(
            {
                "node": part.get("node", ""),
                "replica": part.get("replica", 0),
                "topology": part.get("topology", ""),
                "topology_label": TOPOLOGY_LABELS.get(part.get("topology", ""), part.get("topology", "")),
                "cards": cards,
            }
        )
    return rows


def _candidate_rows(trace: DecisionTrace, chosen_nodes: set[str]) -> list[dict]:
    rows = []
    for rank, candidate in enumerate(trace.candidates or [], start=1):
        if not isinstance(candidate, dict):
            continue
        score = candidate.get("score")
        rows.append(
            {
                "rank": rank,
                "node": candidate.get("node", ""),
                "score": score_text(score) if isinstance(score, list) else str(score or ""),
                "chosen": candidate.get("node") in chosen_nodes,
            }
        )
    return rows


def _step_rows(trace: DecisionTrace) -> list[dict]:
    return [
        {"tier": step.get("tier", ""), "message": step.get("message", "")}
        for step in trace.steps or []
        if isinstance(step, dict)
    ]


def _why(job: Job, user=None) -> dict[str, Any]:
    """ "Why this card?" (latest placed trace) or "Why pending?" (latest pending trace + live position)."""
    traces = DecisionTrace.objects.filter(job=job).order_by("-created_at", "-id")
    if job.state in QUEUED_STATES:
        trace = traces.filter(
            outcome__in=[DecisionTrace.Outcome.PENDING, DecisionTrace.Outcome.CONFLICT]
        ).first()
        explanation = (trace.explanation if trace else "") or job.state_reason
        staff = user is None or is_platform_staff(user)
        # Without the nodes this reader cannot see (issue 29 §9), here and in the trace's steps.
        explanation = explanation_for_reader(explanation, staff=staff)
        steps = [
            {**step, "message": explanation_for_reader(step["message"], staff=staff)}
            for step in (_step_rows(trace) if trace else [])
        ]
        # quota + device fit + position among the jobs this user sees + ETA (apps.scheduling.eta)
        answer = why_pending(job, user)
        return {
            "mode": "pending",
            "trace": trace,
            "queue_position": answer["queue_position"],
            "eta": answer["eta"],
            "quota": answer["quota"] if not explanation.startswith("quota:") else None,
            # The last step repeats the explanation shown above it.
            "steps": [s for s in steps if s["message"] != explanation],
            "explanation": explanation,
        }
    trace = traces.filter(outcome=DecisionTrace.Outcome.PLACED).first()
    if trace is None:
        return {"mode": "none", "trace": None}
    placement = _placement_rows(trace.placement)
    chosen = {row["node"] for row in placement}
    return {
        "mode": "placed",
        "trace": trace,
        "placement": placement,
        "steps": _step_rows(trace),
        "candidates": _candidate_rows(trace, chosen),
        "cross_node": bool((trace.placement or {}).get("cross_node")),
    }


def _can_act(user, job: Job) -> bool:
    return user_role(user, job.project) in CANCEL_ROLES


# The job page's live sections (issue 29 §2): name → template partial. The page includes each one in
# a wrapper with data-live-section="job-<pk>-<name>"; jobs:live renders them again for live.js.
JOB_SECTIONS = {
    "reason": "jobs/_job_reason.html",
    "actions": "jobs/_job_actions.html",
    "runbook": "jobs/_runbook_card.html",
    "facts": "jobs/_job_facts.html",
    "why": "jobs/_job_why.html",
    "allocations": "jobs/_job_allocations.html",
    "timeline": "jobs/_job_timeline.html",
}


def job_sections_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    """What the job page's live sections show: the state, the request and its times, why this card or
    why pending (with the ETA), the allocations, the timeline, what the reader may do."""
    user = request.user
    staff = is_platform_staff(user)
    job.state_tone = STATE_TONES.get(job.state, "muted")
    events = list(job.events.all())
    labels = dict(JobState.choices)
    for event in events:
        event.to_tone = STATE_TONES.get(event.to_state, "muted")
        event.to_label = labels.get(event.to_state, event.to_state)
        event.from_label = labels.get(event.from_state, event.from_state)
        event.reader_message = explanation_for_reader(event.message, staff=staff)
    allocations = list(
        Allocation.objects.filter(job=job)
        .select_related("node", "device")
        .order_by("replica", "node__name", "device__index", "id")
    )
    can_act = _can_act(user, job)
    # The state's reason as this reader may read it (engine_texts.explanation_for_reader).
    job.reader_reason = explanation_for_reader(job.state_reason, staff=staff)
    return {
        "job": job,
        "request_text": request_describe(job),
        "expected_hours": (
            None if job.expected_duration_s is None else Decimal(job.expected_duration_s) / Decimal(3600)
        ),
        "events": events,
        "allocations": allocations,
        "active_allocations": sum(1 for a in allocations if a.released_at is None),
        # What the job's live cards are worth now (a scaled job, a request template): else the request's.
        "held_cu": sum((a.compute_units for a in allocations if a.released_at is None), Decimal(0))
        if any(a.released_at is None for a in allocations)
        else None,
        "why": _why(job, user),
        "can_cancel": job.state not in FINAL_STATES and can_act,
        "can_copy": can_act,
        "is_active": job.state in ACTIVE_STATES,
        "runbook": _runbook_card(job.failure_class, request),
    }


def job_sections(request: HttpRequest, job: Job, parts: list[str] | None = None) -> dict[str, dict]:
    """The job page's sections (all, or ``parts``) as ``{part: {"version", "html"}}``."""
    context = job_sections_context(request, job)
    wanted = [p for p in (parts if parts is not None else JOB_SECTIONS) if p in JOB_SECTIONS]
    return {part: live_sections.render_section(request, JOB_SECTIONS[part], context) for part in wanted}


@login_required
@require_safe
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    user = request.user
    job = get_object_or_404(selectors.job_list(user=user), pk=pk)
    context = job_sections_context(request, job)
    context["sections"] = {
        part: live_sections.page_section(live_sections.render_section(request, template, context))
        for part, template in JOB_SECTIONS.items()
    }
    context.update(
        {
            "utilization_chart": _utilization_chart(job, user),
            # Per card: utilization, memory, temperature, power over the job's life (telemetry's provider).
            "card_curves": (card_curves := job_card_curves(job, user) or ""),
            # plotly.js only when a curve is drawn (the charts' divs are "job-card-<metric>-chart")
            "card_curves_charts": bool(re.search(r'id="job-card-\w+-chart"', card_curves)),
            # Pod events and the log tail come lazily from job_pod (static/js/job-pod.js).
            "pod_url": reverse("jobs:pod", args=[job.pk]),
            "pod_refresh_s": POD_REFRESH_S if job.state in ACTIVE_STATES else 0,
        }
    )
    return render(request, "jobs/job_detail.html", context)


@never_cache
@login_required
@require_safe
def job_pod(request: HttpRequest, pk: int) -> HttpResponse:
    """The job page's "Pods, events and log" panel as an HTML fragment, fetched by the page after it
    loaded and again every ``POD_REFRESH_S`` seconds while the job is active. The cluster is asked
    through the backend interface (``apps.clusters.pod_report``) with a bounded timeout; a cluster
    that does not answer is a message in the fragment. Same visibility as the page: another
    project's job is a 404; viewers read it like members (nothing here writes)."""
    job = get_object_or_404(selectors.job_list(user=request.user), pk=pk)
    report = job_pod_report(job)
    context = {"report": report, "refresh": POD_REFRESH_S if job.state in ACTIVE_STATES else 0}
    return render(request, "jobs/_job_pod.html", context)


@login_required
@require_POST
def job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(selectors.job_list(user=request.user), pk=pk)
    reason = (request.POST.get("reason") or "").strip()[:300]
    try:
        lifecycle.job_cancel(job=job, actor=request.user, reason=reason)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Job %(name)s cancelled; its cards were released.") % {"name": job.name})
    return redirect("jobs:detail", pk=job.pk)


def _runbook_card(key: str, request: HttpRequest) -> dict | None:
    """The fault runbook entry a failure points at, in the page's language."""
    entry = runbook_entry(key) if key else None
    if entry is None:
        return None
    language = getattr(request, "LANGUAGE_CODE", "en")
    return {
        "key": entry.key,
        **{f: entry.text(f, language) for f in ("symptom", "causes", "checks", "fixes")},
    }


@login_required
def runbook(request: HttpRequest) -> HttpResponse:
    """The fault runbook (seed 000 §4.3): symptom, likely causes, checks, fixes."""
    language = getattr(request, "LANGUAGE_CODE", "en")
    rows = [
        {
            "key": e.key,
            "hardware": e.hardware,
            **{f: e.text(f, language) for f in ("symptom", "causes", "checks", "fixes")},
        }
        for e in runbook_entries()
    ]
    return render(request, "jobs/runbook.html", {"entries": rows})


def _utilization_chart(job: Job, user) -> str:
    """The job's utilization curve (telemetry's provider: busy ÷ allocated per 5-minute window), or ""."""
    return job_utilization_chart(job, user) or ""
