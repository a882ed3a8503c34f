"""Server-rendered job pages: the list, the submit form with its live placement preview, the detail.

They live in scheduling, not in jobs, because they show what scheduling knows (allocations, decision
traces, "why pending?", the live placement preview); they are mounted at /jobs/ under the URL
namespace "jobs" (``apps.scheduling.job_urls``). What they show from the layers above — the
utilization curve (telemetry) and the cost per hour (billing) — comes through the slots in
``apps.scheduling.extensions``, filled by those apps' ``AppConfig.ready()``.

Every read goes through ``apps.jobs.selectors.job_list`` (scoped by membership); another project's
job is a 404, never a 403. Writes go through the lifecycle (``apps.scheduling.lifecycle``: submit,
cancel); their ApplicationErrors become form errors or messages, never a 500.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Page
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from apps.accounts.models import Membership
from apps.accounts.selectors import is_platform_staff, project_list, user_role
from apps.clusters.pod_report import job_pod_report
from apps.core import live as live_sections
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.filters import page_filter
from apps.core.formatting import plain_decimal
from apps.core.paginators import EstimatedCountPaginator
from apps.core.stored_text import localize
from apps.core.templatetags.suanchi import DEVICE_KIND_BY_VENDOR
from apps.inventory import selectors as inventory_selectors
from apps.inventory.models import Device, Node
from apps.jobs import selectors
from apps.jobs.filtersets import JobPageFilterSet
from apps.jobs.forms import REQUEST_FIELDS, JobSubmitForm, submittable_projects
from apps.jobs.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    PRIORITY_VALUES,
    QUEUED_STATES,
    Allocation,
    Job,
    JobState,
)
from apps.quotas.selectors import queue_positions as quota_queue_positions
from apps.quotas.selectors import quota_usage
from apps.quotas.services import submission_check
from apps.scheduling import eta, lifecycle
from apps.scheduling import services as scheduling
from apps.scheduling.engine.engine import Engine
from apps.scheduling.engine.policies import BEST
from apps.scheduling.engine_texts import TOPOLOGY_LABELS, explanation_for_reader
from apps.scheduling.extensions import JOB_CARD_CURVES, JOB_COST_PER_HOUR, JOB_UTILIZATION_CHART
from apps.scheduling.faults import runbook as runbook_entries
from apps.scheduling.faults import runbook_entry
from apps.scheduling.models import DecisionTrace
from apps.scheduling.requests import (
    job_requests,
    request_describe,
    request_feasible_anywhere,
    request_validate,
)
from apps.scheduling.selectors import why_pending
from apps.scheduling.snapshot import fleet_snapshot

PAGE_SIZE = 50
# The log tail of an active job is fetched again this often (seconds).
POD_REFRESH_S = 10
# The filters the job list's bar shows (apps.core.filters.page_filter).
JOB_FILTERS = ("search", "project", "state", "kind", "mine")
# Sortable columns of the job list: ?sort=<key> or ?sort=-<key>.
JOB_SORTS = {
    "name": ("name", "id"),
    "project": ("project__name", "id"),
    "state": ("state", "id"),
    "priority": ("priority", "created_at"),
    "cu": ("requested_cu", "id"),
    "submitted": ("created_at", "id"),
}
BULK_CANCEL_MAX = 200
PREVIEW_TOP_K = 5
PREVIEW_REJECTIONS = 12
CANCEL_ROLES = (Membership.Role.MEMBER, Membership.Role.ADMIN)
# Badge tones (classes in suanchi.css) per job state.
STATE_TONES = {
    JobState.PENDING: "info",
    JobState.ADMITTED: "info",
    JobState.SCHEDULED: "accent",
    JobState.RUNNING: "ok",
    JobState.SUCCEEDED: "ok",
    JobState.FAILED: "bad",
    JobState.PREEMPTED: "warn",
    JobState.CANCELLED: "muted",
}


def _paginate(request: HttpRequest, qs) -> Page:
    # Estimated count over the whole unfiltered job table (issue 20); exact whenever filtered.
    return EstimatedCountPaginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))


def _query_without_page(request: HttpRequest) -> str:
    query: QueryDict = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


def _device_label(vendor: str, index: int) -> str:
    return f"{DEVICE_KIND_BY_VENDOR.get(vendor, 'GPU')}{index}"


def queue_positions(jobs: list[Job]) -> dict[int, int]:
    """1-based queue positions of the queued ``jobs`` (the scheduling order: priority, then fair
    share when quotas are configured, then age, then id)."""
    return quota_queue_positions([job.pk for job in jobs if job.state in QUEUED_STATES])


# ------------------------------------------------------------------ list


@login_required
@require_safe
def job_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    filterset, form = page_filter(
        JobPageFilterSet, request, selectors.job_list(user=user), fields=JOB_FILTERS
    )
    sort = request.GET.get("sort", "")
    key = sort.lstrip("-")
    qs = filterset.qs
    if key in JOB_SORTS:
        columns = JOB_SORTS[key]
        qs = qs.order_by(*(f"-{c}" if sort.startswith("-") else c for c in columns))
    else:
        sort = ""
    if request.GET.get("format") == "csv":
        return _job_list_csv(qs)
    page = _paginate(request, qs)
    jobs = job_rows(request, list(page.object_list))
    for job in jobs:
        job.live_row = live_sections.page_section(job.live_row)
    query = _query_without_page(request)
    context = {
        "form": form,
        "page": page,
        "jobs": jobs,
        "page_query": query,
        "sort": sort,
        "sort_query": "&".join(part for part in query.split("&") if part and not part.startswith("sort=")),
        "can_submit": submittable_projects(user).exists(),
        "any_cancellable": any(job.can_cancel for job in jobs),
    }
    return render(request, "jobs/job_list.html", context)


def job_rows(request: HttpRequest, jobs: list[Job]) -> list[Job]:
    """The job list's rows: each job with what its row shows (queue position among the jobs this
    reader sees, the CU its cards hold now, whether the reader may cancel it) and the row rendered as
    a live section (``job.live_row``: ``{"version", "html"}``, issue 29 §2)."""
    user = request.user
    positions = eta.visible_queue_positions(user, jobs)  # counts only the jobs this user can see
    held = _held_cu([job.pk for job in jobs])
    staff = is_platform_staff(user)
    roles = dict(Membership.objects.filter(user=user).values_list("project_id", "role"))
    for job in jobs:
        job.request_text = request_describe(job)
        job.queue_pos = positions.get(job.pk)
        job.state_tone = STATE_TONES.get(job.state, "muted")
        job.held_cu = held.get(job.pk)
        job.can_cancel = job.state not in FINAL_STATES and (
            staff or roles.get(job.project_id) in CANCEL_ROLES
        )
        job.live_row = live_sections.render_section(request, "jobs/_job_row.html", {"job": job})
    return jobs


def _held_cu(job_ids: list[int]) -> dict[int, Decimal]:
    """CU per hour each job holds now (its live allocations): what a scaled job really costs."""
    rows = (
        Allocation.objects.filter(job_id__in=job_ids, released_at__isnull=True)
        .values("job_id")
        .annotate(total=Sum("compute_units"))
    )
    return {row["job_id"]: row["total"] for row in rows}


CSV_COLUMNS = (
    "id",
    "name",
    "project",
    "kind",
    "state",
    "request",
    "requested_cu",
    "priority",
    "submitted_by",
    "created_at",
    "started_at",
    "finished_at",
)


def _job_list_csv(qs) -> HttpResponse:
    """The filtered job list as CSV (platform time zone, formula-neutralised cells)."""
    import csv
    import io

    from django.utils import timezone

    from apps.core.exports import csv_row

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for job in qs.select_related(
        "project",
        "submitted_by",
        "template__device_model",
        "device_model",
        "request_template",
        "workload_profile",
    )[:10000]:

        def when(value):
            return timezone.localtime(value).isoformat(timespec="seconds") if value else ""

        writer.writerow(
            csv_row(
                [
                    job.pk,
                    job.name,
                    job.project.slug,
                    job.kind,
                    job.state,
                    request_describe(job),
                    job.requested_cu if job.requested_cu is not None else "",
                    job.priority_class,
                    job.submitted_by.get_username() if job.submitted_by else "",
                    when(job.created_at),
                    when(job.started_at),
                    when(job.finished_at),
                ]
            )
        )
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="jobs.csv"'
    return response


@login_required
@require_POST
def job_bulk_cancel(request: HttpRequest) -> HttpResponse:
    """Cancel the checked jobs (each through the lifecycle, each with the user's rights); a summary
    says how many were cancelled and why the others were not."""
    user = request.user
    ids = [int(v) for v in request.POST.getlist("ids") if str(v).isdigit()][:BULK_CANCEL_MAX]
    reason = (request.POST.get("reason") or "").strip()[:200]
    if not ids:
        messages.error(request, _("Check the jobs to cancel first."))
        return redirect("jobs:list")
    if not reason:
        messages.error(request, _("Give a reason for cancelling (it goes into each job's history)."))
        return redirect("jobs:list")
    done, refused = 0, []
    for job in selectors.job_list(user=user).filter(pk__in=ids).order_by("pk"):
        try:
            lifecycle.job_cancel(job=job, actor=user, reason=reason)
        except ApplicationError as exc:
            refused.append(f"{job.name}: {exc.message}")
        else:
            done += 1
    missing = len(ids) - done - len(refused)
    if done:
        messages.success(request, _("%(n)s job(s) cancelled.") % {"n": done})
    for line in refused[:10]:
        messages.error(request, line)
    if missing > 0:
        messages.error(
            request, _("%(n)s job(s) are not visible to you and were left alone.") % {"n": missing}
        )
    return redirect("jobs:list")


# ------------------------------------------------------------------ submit


def _submit_refusal(user) -> str:
    """Why this user cannot submit anywhere (shown instead of the form)."""
    if project_list(user=user).exists():
        return _(
            "You are a viewer in your projects: viewers can follow jobs but not submit them. "
            "Ask a project admin to make you a member."
        )
    return _("You are not a member of any project yet. Ask a project admin to add you.")


def _request_kind_fields() -> dict[str, list[str]]:
    return {kind: list(names) for kind, names in REQUEST_FIELDS.items()}


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def job_submit(request: HttpRequest) -> HttpResponse:
    user = request.user
    can_submit = submittable_projects(user).exists()
    if not can_submit:
        status = 403 if request.method == "POST" else 200
        context = {"refusal": _submit_refusal(user), "form": None}
        return render(request, "jobs/job_submit.html", context, status=status)
    initial: dict[str, Any] = {}
    if request.GET.get("from", "").isdigit():
        source = selectors.job_list(user=user).filter(pk=request.GET["from"]).first()
        if source is not None:
            initial = JobSubmitForm.initial_from(source)
    elif request.GET.get("project", "").isdigit():
        initial["project"] = request.GET["project"]
    form = JobSubmitForm(request.POST if request.method == "POST" else None, user=user, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            job = lifecycle.job_submit(
                project=form.cleaned_data["project"], actor=user, **form.service_values()
            )
        except ApplicationError as exc:
            form.add_service_errors(exc.message, exc.details)
        except ValidationError as exc:
            details = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
            form.add_service_errors("", details)
        else:
            messages.success(
                request,
                _("Job %(name)s submitted: it waits in the queue for the next scheduling cycle.")
                % {"name": job.name},
            )
            return redirect("jobs:detail", pk=job.pk)
    context = {
        "form": form,
        "refusal": "",
        "preview_url": reverse("jobs:submit-preview"),
        "request_kind_fields": _request_kind_fields(),
    }
    return render(request, "jobs/job_submit.html", context)


def _json_errors(form: JobSubmitForm) -> dict[str, list[str]]:
    return {name: [e["message"] for e in errors] for name, errors in form.errors.get_json_data().items()}


def _unsaved_job(form: JobSubmitForm) -> Job:
    """The request as an unsaved Job (never saved: ``job.pk`` stays None, so requests use id "new")."""
    values = form.request_values()
    data = form.cleaned_data
    job = Job(name=data.get("name") or "", image=data.get("image") or "", **values)
    if data.get("project") is not None:
        job.project = data["project"]
    job.priority = PRIORITY_VALUES.get(job.priority_class, PRIORITY_VALUES["normal"])
    return job


def _precheck_failures(job: Job) -> dict[str, str]:
    """Nodes whose driver cannot run the job's runtime requirement (as the scheduling cycle checks)."""
    if not (job.runtime_requirement or "").strip():
        return {}
    nodes = list(Node.objects.exclude(status=Node.Status.RETIRED))
    try:
        return scheduling.precheck_failures(job, nodes)
    except ApplicationError:
        return {}


def _decimal(value: Decimal | None) -> str | None:
    return None if value is None else plain_decimal(value)


def _placement_preview(job: Job, user) -> dict[str, Any]:
    """Which nodes and cards could take the request now, per alternative shape (nothing is written)."""
    snapshot = fleet_snapshot()
    # The cycle's own policy, so the preview's candidates and scores are the ones the job page shows
    # once the cycle placed it (issue 29 §9: "score 58" here, "135.55985, -7000, 0" there).
    engine = Engine(policy=scheduling.scheduler_policy() or BEST, top_k=PREVIEW_TOP_K)
    failures = _precheck_failures(job)
    visible = set(inventory_selectors.node_list(user=user).values_list("name", flat=True))
    hidden = _("a node you cannot see")

    def shown(name: str) -> str:
        return name if name in visible else hidden

    decisions = []
    for request_, cu in job_requests(job, precheck_failures=failures):
        decision = engine.place(snapshot, request_, commit=False)
        decisions.append((request_, cu, decision))
    device_ids = {
        int(a.device_id)
        for _r, _c, d in decisions
        if d.placed
        for part in d.placement.parts
        for a in part.devices
    }
    devices = {
        row["pk"]: row
        for row in Device.objects.filter(pk__in=device_ids).values("pk", "vendor", "index", "uuid")
    }
    alternatives = []
    chosen = None
    for i, (request_, cu, decision) in enumerate(decisions):
        entry: dict[str, Any] = {
            "index": i,
            "models": sorted({model for group in request_.groups for model in group.models}),
            "compute_units": _decimal(cu),
            "placed": decision.placed,
            "nodes": [],
            "candidates": [
                {"node": shown(c.node), "score": list(c.score), "score_text": score_text(c.score)}
                for c in decision.candidates
            ],
            # In the reader's language (the engine writes English: apps.scheduling.engine_texts), and
            # counting only the nodes the reader can see, like the per-node reasons below.
            "explanation": localize(
                explanation_for_reader(decision.explanation, staff=is_platform_staff(user))
            ),
            # Per-node reasons for the nodes the user can see.
            "rejections": [
                {"node": name, "reason": localize(reason)}
                for name, reason in sorted(decision.rejections.items())
                if name in visible
            ][:PREVIEW_REJECTIONS]
            if not decision.placed
            else [],
        }
        if decision.placed:
            for part in decision.placement.parts:
                cards = []
                for a in part.devices:
                    row = devices.get(int(a.device_id), {})
                    cards.append(
                        {
                            "label": _device_label(row.get("vendor", ""), a.index),
                            "uuid": row.get("uuid", ""),
                            "whole": a.whole,
                            "memory_mib": a.memory_mib,
                            "compute_pct": round(a.compute / 10, 1),
                        }
                    )
                entry["nodes"].append({"node": shown(part.node), "replica": part.replica, "cards": cards})
            if chosen is None:
                chosen = i
        entry["chosen"] = False
        alternatives.append(entry)
    if chosen is not None:
        alternatives[chosen]["chosen"] = True
    return {"placed_now": chosen is not None, "alternatives": alternatives}


def _recommendation(job: Job) -> dict | None:
    """For a profile request: the benchmark library's ranked options, each able to fill the form."""
    if (
        job.request_kind != Job.RequestKind.PROFILE
        or not job.workload_profile_id
        or not job.target_throughput
    ):
        return None
    from apps.benchlib.recommend import recommend

    answer = recommend(
        profile=job.workload_profile,
        target=job.target_throughput,
        latency_ms=job.target_latency_ms,
        vendors=list(job.allowed_vendors or []),
        project_id=job.project_id,
    )
    body = answer.as_dict()
    for row, option in zip(body["options"], answer.options, strict=True):
        row["template_id"] = option.template.pk if option.template else None
        row["device_model_id"] = option.device_model.pk
    body["options"] = body["options"][:8]
    return body


@login_required
@require_POST
def job_submit_preview(request: HttpRequest) -> JsonResponse:
    """The submit form's live preview: validation, the request in words, its price, where it fits now."""
    user = request.user
    if not submittable_projects(user).exists():
        return JsonResponse({"valid": False, "errors": {"__all__": [_submit_refusal(user)]}}, status=403)
    form = JobSubmitForm(request.POST, user=user)
    valid = form.is_valid()
    body: dict[str, Any] = {
        "valid": valid,
        "errors": _json_errors(form),
        "request": None,
        "compute_units_per_hour": None,
        "feasible": None,
        "placed_now": False,
        "alternatives": [],
    }
    if form.request_errors():
        body["valid"] = False
        return JsonResponse(body)
    job = _unsaved_job(form)
    try:
        request_validate(job)
    except ValidationFailed as exc:
        for name, errors in (exc.details or {}).items():
            body["errors"].setdefault(name, []).extend(str(e) for e in errors)
        body["valid"] = False
        return JsonResponse(body)
    body["request"] = request_describe(job)
    body["recommendation"] = _recommendation(job)
    feasibility = request_feasible_anywhere(job)
    body["feasible"] = {"ok": feasibility.ok, "reason": feasibility.reason}
    cu = feasibility.compute_units
    if cu is None:
        alternatives = job_requests(job)
        cu = alternatives[0][1] if alternatives else None
    body["compute_units_per_hour"] = _decimal(cu)
    body["cost_per_hour"] = _cost_per_hour(job, cu)
    body["quota_left"] = _quota_left(job, user)
    if feasibility.ok:
        # The submit's own admission check (issue 21 §3a): what the preview calls ready, the submit takes.
        job.requested_cu = cu
        try:
            submission_check(job)
        except ApplicationError as exc:
            body["valid"] = False
            body["placed_now"] = False
            body["quota_refusal"] = exc.message
            body["errors"].setdefault("__all__", []).append(exc.message)
            return JsonResponse(body)
    if not feasibility.ok:
        body["valid"] = False
        body["errors"].setdefault("__all__", []).append(
            _("No device in the fleet could ever satisfy this request: %(reason)s")
            % {"reason": feasibility.reason}
        )
    body.update(_placement_preview(job, user))
    return JsonResponse(body)


# ------------------------------------------------------------------ detail


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


def score_text(score) -> str:
    """A policy's score key as people read it, the same on the job page and in the submit preview:
    each part rounded to two places, "135.56 · -7000 · 0" (higher ranks first, part by part)."""
    return " · ".join(plain_decimal(part, 2) for part in score)


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
            "card_curves": (card_curves := JOB_CARD_CURVES.first(job, user) or ""),
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


def _cost_per_hour(job: Job, cu) -> str | None:
    """What an hour of this request costs, e.g. "12.50 CNY" (billing's provider: the rate card in force
    today, after the project's discount); None when the compute units or the price are unknown."""
    if cu is None:
        return None
    return JOB_COST_PER_HOUR.first(job, Decimal(cu))


def _quota_left(job: Job, user) -> str | None:
    """The project's guarantee still free now (and how far it may borrow), in compute units."""
    rows = [u for u in quota_usage(user=user)[0] if u.quota.project_id == job.project_id]
    if not rows:
        return None
    left = sum((max(Decimal(0), u.quota.guaranteed_cu - u.guaranteed_used) for u in rows), Decimal(0))
    limits = [u.quota.borrowing_limit_cu for u in rows]
    if any(limit is None for limit in limits):
        borrow = _("may borrow idle capacity without limit")
    else:
        borrow = _("may borrow up to %(cu)s CU") % {"cu": plain_decimal(sum(limits, Decimal(0)))}
    return _("%(left)s CU of the guarantee free; %(borrow)s") % {
        "left": plain_decimal(left),
        "borrow": borrow,
    }


def _utilization_chart(job: Job, user) -> str:
    """The job's utilization curve (telemetry's provider: busy ÷ allocated per 5-minute window), or ""."""
    return JOB_UTILIZATION_CHART.first(job, user) or ""
