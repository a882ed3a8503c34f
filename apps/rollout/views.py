"""Rollout pages: gray batches (list, detail with soak evidence), upgrade waves, autoscaling decisions."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from apps.accounts.selectors import is_platform_staff
from apps.core.errors import ApplicationError
from apps.core.permissions import staff_required
from apps.core.stored_text import localize
from apps.inventory.models import Node
from apps.rollout import charts, selectors, services
from apps.rollout.filtersets import GrayBatchFilterSet
from apps.rollout.models import GrayBatch, Layer, UpgradeWave


@login_required
@require_safe
def batch_list(request: HttpRequest) -> HttpResponse:
    if not is_platform_staff(request.user):  # project members see their services' autoscaling
        return redirect("rollout:autoscaling")
    filterset = GrayBatchFilterSet(request.GET, queryset=selectors.batch_list(user=request.user))
    page = Paginator(filterset.qs.order_by("-created_at", "-pk"), 50).get_page(request.GET.get("page"))
    return render(
        request,
        "rollout/batch_list.html",
        {"filterset": filterset, "page": page, "stages": GrayBatch.Stage.choices},
    )


class NodeReleaseForm(forms.Form):
    """Release a node of a rolled-back batch from quarantine; the reason goes to the ledger history."""

    node = forms.IntegerField()
    reason = forms.CharField(max_length=300, strip=True)


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
    nodes = list(batch.nodes.select_related("cluster").order_by("name"))
    return {
        "batch": batch,
        "nodes": nodes,
        "quarantined": _quarantined_nodes(batch, nodes),
        "can_release": batch.stage == GrayBatch.Stage.ROLLED_BACK,
        "results": results,
        "latest": latest,
        "wave": wave,
        "blockers": selectors.wave_blockers(wave) if wave else [],
        "runs": batch.benchmark_runs.select_related("node").order_by("-measured_at")[:20],
        "chart_html": mark_safe(charts.soak_evidence_html(latest, batch.criteria)),  # noqa: S308 - plotly markup
    }


@staff_required
@require_safe
def batch_detail(request: HttpRequest, pk: int) -> HttpResponse:
    batch = get_object_or_404(selectors.batch_list(user=request.user), pk=pk)
    return render(request, "rollout/batch_detail.html", _detail_context(batch))


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
    return render(request, "rollout/batch_detail.html", context, status=status)


# Badge tones per stage, as templates/rollout/_stage.html draws them.
STAGE_TONES = {"passed": "ok", "admitted": "ok", "failed": "bad", "soaking": "info", "pending": "info"}
STAGE_TONES["rolled_back"] = "warn"


@never_cache
@staff_required
@require_safe
def batch_live(request: HttpRequest, pk: int) -> JsonResponse:
    """A gray batch's stage and reason for ``static/js/live.js`` (issue 21: live pages)."""
    batch = get_object_or_404(selectors.batch_list(user=request.user), pk=pk)
    reason = localize(batch.stage_reason) if batch.stage_reason else ""
    fields = {
        f"batch-{batch.pk}-stage": {
            "text": str(batch.get_stage_display()),
            "tone": STAGE_TONES.get(batch.stage, "muted"),
            "value": batch.stage,
        },
        f"batch-{batch.pk}-reason": {"text": str(reason) or "—"},
    }
    return JsonResponse({"fields": fields})


@staff_required
@require_safe
def wave_list(request: HttpRequest) -> HttpResponse:
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
    return render(request, "rollout/waves.html", {"plans": plans})


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
