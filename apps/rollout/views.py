"""Rollout pages: gray batches (list, create, detail with soak evidence and its stage changes), upgrade
plans and waves, autoscaling decisions.

Every write is a staff-only POST with a reason that calls one ``apps.rollout.services`` function (which
validates, decides and writes the audit record); the actor and ``created_by`` are the signed-in user.
Bad input is a 400 and a refused stage change a 409, both re-rendering the page with the message.
"""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from apps.accounts.selectors import is_platform_staff
from apps.core import live as live_sections
from apps.core.errors import ApplicationError
from apps.core.permissions import staff_required
from apps.core.stored_text import localize
from apps.inventory.models import Cluster, Node, Pool
from apps.rollout import charts, selectors, services
from apps.rollout.filtersets import GrayBatchFilterSet
from apps.rollout.forms import (
    BatchCreateForm,
    NodeReleaseForm,
    PlanCreateForm,
    ReasonForm,
    WaveCreateForm,
)
from apps.rollout.models import GrayBatch, Layer, UpgradeWave


@login_required
@require_safe
def batch_list(request: HttpRequest) -> HttpResponse:
    if not is_platform_staff(request.user):  # project members see their services' autoscaling
        return redirect("rollout:autoscaling")
    filterset = GrayBatchFilterSet(request.GET, queryset=selectors.batch_list(user=request.user))
    page = Paginator(filterset.qs.order_by("-created_at", "-pk"), 50).get_page(request.GET.get("page"))
    rows = _batch_rows(request, list(page.object_list))
    for batch in rows:
        batch.live_row = live_sections.page_section(batch.live_row)
    return render(
        request,
        "rollout/batch_list.html",
        {"filterset": filterset, "page": page, "rows": rows, "stages": GrayBatch.Stage.choices},
    )


def _batch_rows(request: HttpRequest, batches: list[GrayBatch]) -> list[GrayBatch]:
    """Each batch with its list row rendered as a live section (``batch.live_row``, issue 29 §2)."""
    for batch in batches:
        batch.live_row = live_sections.render_section(request, "rollout/_batch_row.html", {"batch": batch})
    return batches


BATCH_ROW = re.compile(r"^batch-(\d{1,12})-row$")


@never_cache
@staff_required
@require_safe
def batch_list_live(request: HttpRequest) -> JsonResponse:
    """The batch list's rows (``?sections=batch-<pk>-row,…``) for ``static/js/live.js``: the stage,
    the soak start and the reason of each listed batch; staff only, like the list."""
    try:
        names = live_sections.requested_sections(request)
    except live_sections.SectionsInvalid:
        return live_sections.sections_invalid_response()
    pks = {int(m[1]) for m in map(BATCH_ROW.match, names) if m}
    batches = list(selectors.batch_list(user=request.user).filter(pk__in=pks).prefetch_related("nodes"))
    sections = {f"batch-{b.pk}-row": b.live_row for b in _batch_rows(request, batches)}
    return JsonResponse({"fields": {}, "sections": sections})


# The batch page's stage changes (services.BATCH_ACTIONS): label, what it does, and the message after.
BATCH_ACTIONS = {
    "start_soak": (
        gettext_lazy("Start the soak"),
        gettext_lazy(
            "The cards go to the gray pool and the nodes get the suanchi.io/gray label and taint: only "
            "jobs that opt in run there."
        ),
    ),
    "evaluate": (
        gettext_lazy("Evaluate now"),
        gettext_lazy(
            "Computes the soak result from telemetry and device events; a violated limit fails the batch, "
            "a complete soak passes it."
        ),
    ),
    "admit": (
        gettext_lazy("Admit to production"),
        gettext_lazy("The cards return to production; label and taint are removed."),
    ),
    "fail": (
        gettext_lazy("Fail and quarantine"),
        gettext_lazy("For a problem the criteria do not see: the nodes and their cards are quarantined."),
    ),
    "rollback": (
        gettext_lazy("Roll back"),
        gettext_lazy(
            "The change was reverted on the nodes: gray cards return to production, label and taint go; "
            "nodes only this batch's failure quarantined are released."
        ),
    ),
}
ACTION_DONE = {
    "start_soak": gettext_lazy("Soak of %(batch)s started."),
    "evaluate": gettext_lazy("%(batch)s evaluated: %(verdict)s."),
    "admit": gettext_lazy("%(batch)s admitted to production."),
    "fail": gettext_lazy("%(batch)s failed; its nodes are quarantined."),
    "rollback": gettext_lazy("%(batch)s rolled back."),
}
# Audit actions as people read them on the batch page.
HISTORY_LABELS = {
    "graybatch.create": gettext_lazy("Batch created"),
    "graybatch.update": gettext_lazy("Batch changed"),
    "graybatch.evaluate": gettext_lazy("Soak evaluated on request"),
    "graybatch.soaking": gettext_lazy("Soak started"),
    "graybatch.passed": gettext_lazy("Soak passed"),
    "graybatch.failed": gettext_lazy("Batch failed"),
    "graybatch.admitted": gettext_lazy("Batch admitted to production"),
    "graybatch.rolled_back": gettext_lazy("Batch rolled back"),
}
NODES_SHOWN = 100


def _error_status(exc: ApplicationError) -> int:
    return exc.status_code if exc.status_code in (400, 403, 404, 409) else 400


def _form_errors_from(form, exc: ApplicationError) -> None:
    """A service refusal on the form: under the field it names when the form has it, else on top."""
    details = exc.details if isinstance(exc.details, dict) else {}
    placed = False
    for name, problems in details.items():
        if name in form.fields and isinstance(problems, list) and name not in ("nodes",):
            for problem in problems:
                form.add_error(name, str(problem))
            placed = True
    if not placed:
        form.add_error(None, exc.message)


def _quarantined_nodes(batch: GrayBatch, nodes: list[Node]) -> list[dict]:
    """The batch's quarantined nodes: why each is quarantined, and why it stays after a rollback."""
    return [
        {
            "node": node,
            "by_batch": (node.status_reason or "").startswith(services.failure_reason_prefix(batch)),
            "hold": services.quarantine_hold(batch=batch, node=node),
        }
        for node in nodes
        if node.status == Node.Status.QUARANTINED
    ]


def _detail_context(batch: GrayBatch) -> dict:
    results = list(batch.results.order_by("-computed_at", "-pk")[:20])
    latest = results[0] if results else None
    wave = UpgradeWave.objects.filter(batch=batch).select_related("plan").first()
    nodes = batch.nodes.select_related("cluster").order_by("name")
    quarantined = list(nodes.filter(status=Node.Status.QUARANTINED))
    history = selectors.batch_history(batch)
    for record in history:
        record.label = HISTORY_LABELS.get(record.action, record.action)
    return {
        "batch": batch,
        "nodes": list(nodes[:NODES_SHOWN]),
        "node_count": nodes.count(),
        "quarantined": _quarantined_nodes(batch, quarantined),
        "actions": [
            {
                "key": key,
                "url_key": key.replace("_", "-"),
                "label": BATCH_ACTIONS[key][0],
                "hint": BATCH_ACTIONS[key][1],
            }
            for key in services.batch_actions(batch)
        ],
        "history": history,
        "can_release": batch.stage == GrayBatch.Stage.ROLLED_BACK,
        "results": results,
        "latest": latest,
        "wave": wave,
        "blockers": selectors.wave_blockers(wave) if wave else [],
        "runs": batch.benchmark_runs.select_related("node").order_by("-measured_at")[:20],
        "chart_html": mark_safe(charts.soak_evidence_html(latest, batch.criteria)),  # noqa: S308 - plotly markup
    }


# A batch page's live sections (issue 29 §2): part → partial; the page wraps each one in
# data-live-section="batch-<pk>-<part>", batch_live renders them again for static/js/live.js.
BATCH_SECTIONS = {
    "actions": "rollout/_batch_actions.html",
    "facts": "rollout/_batch_facts.html",
    "quarantined": "rollout/_batch_quarantined.html",
    "history": "rollout/_batch_history.html",
    "evaluations": "rollout/_batch_evaluations.html",
}


def _with_sections(request: HttpRequest, context: dict) -> dict:
    context["sections"] = {
        part: live_sections.page_section(live_sections.render_section(request, template, context))
        for part, template in BATCH_SECTIONS.items()
    }
    return context


@staff_required
@require_safe
def batch_detail(request: HttpRequest, pk: int) -> HttpResponse:
    batch = get_object_or_404(selectors.batch_list(user=request.user), pk=pk)
    return render(request, "rollout/batch_detail.html", _with_sections(request, _detail_context(batch)))


def _run_batch_action(batch: GrayBatch, action: str, *, reason: str, actor) -> str:
    """Call the action's service; the success message."""
    done = ACTION_DONE[action]
    if action == "start_soak":
        services.batch_soak_start(batch=batch, actor=actor, reason=reason)
    elif action == "evaluate":
        result = services.batch_evaluate(batch=batch, actor=actor, reason=reason)
        return done % {"batch": batch.name, "verdict": result.get_verdict_display()}
    elif action == "admit":
        services.batch_admit(batch=batch, actor=actor, reason=reason)
    elif action == "fail":
        services.batch_fail(batch=batch, actor=actor, reason=reason)
    else:
        outcome = services.batch_rollback(batch=batch, actor=actor, reason=reason).quarantine_outcome
        text = done % {"batch": batch.name}
        for kept in outcome["kept"]:
            text += " " + _("Node %(node)s stays quarantined: %(why)s.") % {
                "node": kept["node"],
                "why": localize(kept["reason"]),
            }
        return text
    return done % {"batch": batch.name}


@staff_required
@require_POST
def batch_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """One stage change of a batch (start soak, evaluate, admit, fail, roll back), staff, with a
    reason. A missing reason is a 400; a stage change the batch's stage does not allow a 409 (the
    service's message); both re-render the page with the error next to the action's form."""
    action = action.replace("-", "_")
    if action not in services.BATCH_ACTIONS:
        raise Http404
    batch = get_object_or_404(selectors.batch_list(user=request.user), pk=pk)
    form = ReasonForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            text = _run_batch_action(batch, action, reason=form.cleaned_data["reason"], actor=request.user)
        except ApplicationError as exc:
            form.add_error(None, exc.message)
            status = _error_status(exc)
        else:
            messages.success(request, text)
            return redirect("rollout:batch-detail", pk=batch.pk)
    batch.refresh_from_db()
    context = _detail_context(batch)
    context["action_form"] = form
    context["action_failed"] = action
    return render(request, "rollout/batch_detail.html", _with_sections(request, context), status=status)


def _create_context(form: BatchCreateForm) -> dict:
    """The create page: the form, the picker's pools and clusters, and the nodes already picked (kept
    when the form comes back with an error)."""
    picked_ids = [int(v) for v in form.data.getlist("nodes") if str(v).isdigit()] if form.is_bound else []
    return {
        "form": form,
        "picked": list(Node.objects.filter(pk__in=picked_ids).select_related("cluster").order_by("name")),
        "pools": Pool.objects.select_related("cluster").order_by("cluster__name", "name"),
        "clusters": Cluster.objects.order_by("name"),
        "statuses": [(v, label) for v, label in Node.Status.choices if v != Node.Status.RETIRED],
        "has_criteria": form.fields["criteria"].queryset.exists(),
    }


@staff_required
def batch_create(request: HttpRequest) -> HttpResponse:
    """Create a planned batch (staff): ``created_by`` is the signed-in user, the reason goes to the
    audit record. With a plan, the batch also becomes the plan's wave of its layer, in one
    transaction: a refusal of either writes nothing."""
    if request.method == "POST":
        form = BatchCreateForm(request.POST)
        if form.is_valid():
            kwargs = form.service_kwargs()
            plan = form.cleaned_data.get("plan")
            try:
                with transaction.atomic():
                    batch = services.batch_create(actor=request.user, **kwargs)
                    if plan is not None:
                        services.upgrade_wave_create(
                            actor=request.user, plan=plan, batch=batch, reason=kwargs["reason"]
                        )
            except ApplicationError as exc:
                _form_errors_from(form, exc)
                status = _error_status(exc)
            else:
                messages.success(
                    request,
                    _("Batch %(batch)s created with %(count)s node(s).")
                    % {"batch": batch.name, "count": len(kwargs["nodes"])},
                )
                return redirect("rollout:batch-detail", pk=batch.pk)
        else:
            status = 400
        return render(request, "rollout/batch_create.html", _create_context(form), status=status)
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD, POST"})
    return render(request, "rollout/batch_create.html", _create_context(BatchCreateForm()))


def _int_param(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name, "")
    return int(value) if value.isdigit() else None


@never_cache
@staff_required
@require_safe
def node_search(request: HttpRequest) -> JsonResponse:
    """The create form's node picker: one page of matching nodes (server-side filter and paging, so it
    works the same for ten nodes or ten thousand)."""
    qs = selectors.node_pick_list(
        user=request.user,
        q=request.GET.get("q", "")[:200],
        pool_id=_int_param(request, "pool"),
        cluster_id=_int_param(request, "cluster"),
        status=request.GET.get("status", "") if request.GET.get("status") in Node.Status.values else "",
    )
    page = Paginator(qs, selectors.PICK_PAGE_SIZE).get_page(request.GET.get("page"))
    return JsonResponse(
        {
            "count": page.paginator.count,
            "page": page.number,
            "pages": page.paginator.num_pages,
            "results": [
                {
                    "id": node.pk,
                    "name": node.name,
                    "cluster": node.cluster.name,
                    "pool": str(node.pool.name) if node.pool_id else "",
                    "status": str(node.get_status_display()),
                    "cards": node.cards,
                    "gray_batch": node.gray_batch or "",
                }
                for node in page.object_list
            ],
        }
    )


@staff_required
@require_POST
def batch_node_release(request: HttpRequest, pk: int) -> HttpResponse:
    """Release one of the batch's nodes from quarantine (staff, with a reason). A missing reason or a
    node outside the batch is a 400, a batch not rolled back or a node not quarantined a 409; both
    re-render the page with the error next to the form."""
    batch = get_object_or_404(selectors.batch_list(user=request.user), pk=pk)
    form = NodeReleaseForm(request.POST)
    status = 400
    error = _("Give a reason for releasing the node.")
    if form.is_valid():
        node = batch.nodes.filter(pk=form.cleaned_data["node"]).first()
        if node is None:
            error = _("That node is not in this batch.")
        else:
            try:
                services.batch_node_release(
                    batch=batch, node=node, actor=request.user, reason=form.cleaned_data["reason"]
                )
            except ApplicationError as exc:
                error, status = exc.message, exc.status_code
            else:
                messages.success(request, _("Node %(node)s released from quarantine.") % {"node": node.name})
                return redirect("rollout:batch-detail", pk=batch.pk)
    batch.refresh_from_db()
    context = _detail_context(batch)
    context["release_error"] = error
    context["release_node"] = request.POST.get("node", "")
    return render(request, "rollout/batch_detail.html", _with_sections(request, context), status=status)


# Badge tones per stage, as templates/rollout/_stage.html draws them.
STAGE_TONES = {"passed": "ok", "admitted": "ok", "failed": "bad", "soaking": "info", "pending": "info"}
STAGE_TONES["rolled_back"] = "warn"


@never_cache
@staff_required
@require_safe
def batch_live(request: HttpRequest, pk: int) -> JsonResponse:
    """A gray batch's stage and reason for ``static/js/live.js`` (issue 21: live pages) and, asked
    with ``?sections=batch-<pk>-history,…``, its page's sections (issue 29 §2; ``apps.core.live``)."""
    batch = get_object_or_404(selectors.batch_list(user=request.user), pk=pk)
    try:
        names = live_sections.requested_sections(request)
    except live_sections.SectionsInvalid:
        return live_sections.sections_invalid_response()
    reason = localize(batch.stage_reason) if batch.stage_reason else ""
    fields = {
        f"batch-{batch.pk}-stage": {
            "text": str(batch.get_stage_display()),
            "tone": STAGE_TONES.get(batch.stage, "muted"),
            "value": batch.stage,
        },
        f"batch-{batch.pk}-reason": {"text": str(reason) or "—"},
    }
    body: dict = {"fields": fields}
    prefix = f"batch-{batch.pk}-"
    parts = [n.removeprefix(prefix) for n in names if n.startswith(prefix)]
    parts = [part for part in parts if part in BATCH_SECTIONS]
    if parts:
        context = _detail_context(batch)
        body["sections"] = {
            prefix + part: live_sections.render_section(request, BATCH_SECTIONS[part], context)
            for part in parts
        }
    return JsonResponse(body)


def _waves_context(request: HttpRequest, **forms) -> dict:
    plans = []
    for plan in selectors.plan_list(user=request.user).prefetch_related("waves__batch"):
        waves = sorted(plan.waves.all(), key=lambda w: (w.layer, w.pk))
        plans.append(
            {
                "plan": plan,
                "layers": [
                    {"layer": label, "waves": [w for w in waves if w.layer == value]}
                    for value, label in Layer.choices
                ],
            }
        )
    return {
        "plans": plans,
        "plan_form": forms.get("plan_form") or PlanCreateForm(),
        "wave_form": forms.get("wave_form") or WaveCreateForm(),
        "start_form": forms.get("start_form"),
        "start_failed": forms.get("start_failed"),
    }


@staff_required
@require_safe
def wave_list(request: HttpRequest) -> HttpResponse:
    return render(request, "rollout/waves.html", _waves_context(request))


@staff_required
@require_POST
def plan_create(request: HttpRequest) -> HttpResponse:
    form = PlanCreateForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            plan = services.upgrade_plan_create(actor=request.user, **form.cleaned_data)
        except ApplicationError as exc:
            _form_errors_from(form, exc)
            status = _error_status(exc)
        else:
            messages.success(request, _("Upgrade plan %(plan)s created.") % {"plan": plan.name})
            return redirect("rollout:waves")
    return render(request, "rollout/waves.html", _waves_context(request, plan_form=form), status=status)


@staff_required
@require_POST
def wave_create(request: HttpRequest) -> HttpResponse:
    form = WaveCreateForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            wave = services.upgrade_wave_create(actor=request.user, **form.cleaned_data)
        except ApplicationError as exc:
            form.add_error(None, exc.message)
            status = _error_status(exc)
        else:
            messages.success(
                request,
                _("%(batch)s is the %(layer)s wave of %(plan)s.")
                % {"batch": wave.batch.name, "layer": wave.get_layer_display(), "plan": wave.plan.name},
            )
            return redirect("rollout:waves")
    return render(request, "rollout/waves.html", _waves_context(request, wave_form=form), status=status)


@staff_required
@require_POST
def wave_start(request: HttpRequest, pk: int) -> HttpResponse:
    """Start a wave's soak (staff, with a reason); refused with a 409 before earlier layers passed."""
    wave = get_object_or_404(selectors.wave_list(user=request.user), pk=pk)
    form = ReasonForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            services.upgrade_wave_start(wave=wave, actor=request.user, reason=form.cleaned_data["reason"])
        except ApplicationError as exc:
            form.add_error(None, exc.message)
            status = _error_status(exc)
        else:
            messages.success(request, _("Wave %(batch)s started.") % {"batch": wave.batch.name})
            return redirect("rollout:waves")
    context = _waves_context(request, start_form=form, start_failed=wave.pk)
    return render(request, "rollout/waves.html", context, status=status)


@login_required
@require_safe
def autoscaling(request: HttpRequest) -> HttpResponse:
    user = request.user
    policies = selectors.policy_list(user=user).order_by("job__project__slug", "job__name")
    decisions = list(selectors.decision_list(user=user).order_by("-created_at", "-pk")[:200])
    return render(
        request,
        "rollout/autoscaling.html",
        {
            "policies": policies,
            "decisions": decisions[:50],
            "chart_html": mark_safe(charts.scale_history_html(decisions)),  # noqa: S308 - plotly markup
            "is_staff": is_platform_staff(user),
        },
    )
