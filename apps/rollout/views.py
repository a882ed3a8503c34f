"""Rollout pages: gray batches (list, detail with soak evidence), upgrade waves, autoscaling decisions."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from apps.accounts.selectors import is_platform_staff
from apps.core.permissions import staff_required
from apps.core.stored_text import localize
from apps.rollout import charts, selectors
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


@staff_required
@require_safe
def batch_detail(request: HttpRequest, pk: int) -> HttpResponse:
    batch = get_object_or_404(selectors.batch_list(user=request.user), pk=pk)
    results = list(batch.results.order_by("-computed_at", "-pk")[:20])
    latest = results[0] if results else None
    wave = UpgradeWave.objects.filter(batch=batch).select_related("plan").first()
    return render(
        request,
        "rollout/batch_detail.html",
        {
            "batch": batch,
            "nodes": batch.nodes.select_related("cluster").order_by("name"),
            "results": results,
            "latest": latest,
            "wave": wave,
            "blockers": selectors.wave_blockers(wave) if wave else [],
            "runs": batch.benchmark_runs.select_related("node").order_by("-measured_at")[:20],
            "chart_html": mark_safe(charts.soak_evidence_html(latest, batch.criteria)),  # noqa: S308 - plotly markup
        },
    )


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
