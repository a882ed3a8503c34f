"""The submit form and its live preview: validation, the request in words, its price, where it fits now.

The cost of an hour comes from billing's rate cards (``apps.billing.providers.job_cost_per_hour``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.selectors import is_platform_staff, project_list
from apps.billing.providers import job_cost_per_hour
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.formatting import plain_decimal
from apps.core.stored_text import localize
from apps.inventory import selectors as inventory_selectors
from apps.inventory.models import Device, Node
from apps.jobs import selectors
from apps.jobs.forms import REQUEST_FIELDS, JobSubmitForm, submittable_projects
from apps.jobs.models import (
    PRIORITY_VALUES,
    Job,
)
from apps.jobs.views.common import _device_label, score_text
from apps.quotas.selectors import quota_usage
from apps.quotas.services import submission_check
from apps.scheduling import lifecycle
from apps.scheduling import services as scheduling
from apps.scheduling.engine.engine import Engine
from apps.scheduling.engine.policies import BEST
from apps.scheduling.engine_texts import explanation_for_reader
from apps.scheduling.resource_requests import (
    job_requests,
    request_describe,
    request_feasible_anywhere,
    request_validate,
)
from apps.scheduling.snapshot import fleet_snapshot

PREVIEW_TOP_K = 5
PREVIEW_REJECTIONS = 12


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
    from apps.quotas.library import quota_ceiling

    answer = recommend(
        profile=job.workload_profile,
        target=job.target_throughput,
        latency_ms=job.target_latency_ms,
        vendors=list(job.allowed_vendors or []),
        project_id=job.project_id,
        quota_ceiling=quota_ceiling,
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


def _cost_per_hour(job: Job, cu) -> str | None:
    """What an hour of this request costs, e.g. "12.50 CNY" (billing's provider: the rate card in force
    today, after the project's discount); None when the compute units or the price are unknown."""
    if cu is None:
        return None
    return job_cost_per_hour(job, Decimal(cu))


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
