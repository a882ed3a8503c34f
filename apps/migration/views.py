"""Migration cockpit pages: the plan's dashboard, a service's dual tracks, CSV exports.

Reads go through apps.migration.selectors (members see their projects' services and ledger; another
project's service is a 404). Shift / roll back / promote buttons post to services; their refusals
(400 / 409 with the reason) become messages, never a 500.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from apps.accounts.models import Membership
from apps.accounts.selectors import is_platform_staff, user_role
from apps.core.errors import ApplicationError, NotFound
from apps.migration import charts, exports, selectors, services
from apps.migration.filtersets import MigratedServiceFilterSet
from apps.migration.gates import service_gate_results
from apps.migration.models import MigrationPlan, Phase

WINDOW_DAYS = 7


def _chart(fig, div_id: str) -> str:
    # Plotly escapes the data it embeds; names are stripped of markup.
    return mark_safe(charts.figure_html(fig, div_id=div_id))  # noqa: S308


def _window(request: HttpRequest):
    try:
        days = int(request.GET.get("days", WINDOW_DAYS))
    except ValueError:
        days = WINDOW_DAYS
    days = min(90, max(1, days))
    end = timezone.now()
    return days, end - timedelta(days=days), end


def _can_steer(user, service) -> bool:
    return is_platform_staff(user) or user_role(user, service.project) in (
        Membership.Role.MEMBER,
        Membership.Role.ADMIN,
    )


@login_required
@require_safe
def cockpit(request: HttpRequest) -> HttpResponse:
    user = request.user
    plans = list(MigrationPlan.objects.order_by("name"))
    plan = None
    if plans:
        wanted = request.GET.get("plan")
        plan = next((p for p in plans if str(p.pk) == wanted), plans[0])
    days, start, end = _window(request)
    all_services = selectors.service_list(user=user)
    services_qs = all_services.filter(plan=plan) if plan else all_services.none()
    services_qs = MigratedServiceFilterSet(
        {k: v for k, v in request.GET.items() if k in ("phase", "gate_status", "project")},
        queryset=services_qs,
    ).qs
    service_rows = list(services_qs.order_by("phase", "name"))
    comparisons = [
        (service, selectors.track_comparison(service=service, start=start, end=end))
        for service in service_rows
    ]
    months = selectors.vendor_share_by_month(user=user, months=12)
    share_chart = _chart(charts.vendor_share_figure(months), "migration-vendor-share") if months else ""
    this_month = months[-1] if months else None
    source_vendors = plan.source_vendors if plan else ["nvidia"]
    source_share = (
        sum((v["share_pct"] for v in this_month["vendors"] if v["vendor"] in source_vendors), start=0)
        if this_month
        else None
    )
    footprint = selectors.footprint(user=user)
    source_footprint = [row for row in footprint if row["vendor"] in source_vendors]
    context = {
        "plans": plans,
        "plan": plan,
        "days": days,
        "board": selectors.phase_board(service_rows),
        "comparisons": comparisons,
        "etas": {s.pk: selectors.weight_eta(s) for s in service_rows},
        "forecast": selectors.plan_forecast(plan=plan, services=service_rows) if plan else [],
        "months": months,
        "share_chart": share_chart,
        "this_month": this_month,
        "source_share": source_share,
        "footprint": footprint,
        "source_cards": sum(r["cards_allocated"] for r in source_footprint),
        "source_cu": sum((r["compute_units"] for r in source_footprint), start=0),
        "phases": Phase.choices,
        "is_platform_staff": is_platform_staff(user),
        "evidence": selectors.workload_evidence(service_rows),
        "proposals": selectors.open_coefficient_proposals(),
    }
    return render(request, "migration/cockpit.html", context)


@login_required
@require_POST
def proposal_decide(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    """Staff accept (a new coefficient version from tomorrow or a later date) or dismiss a proposal."""
    from apps.benchlib.models import CoefficientProposal
    from apps.benchlib.services import coefficient_proposal_decide

    if not is_platform_staff(request.user):
        messages.error(request, _("Only platform staff decide coefficient proposals."))
        return redirect("migration:cockpit")
    proposal = CoefficientProposal.objects.filter(pk=pk).first()
    if proposal is None or verb not in ("accept", "dismiss"):
        raise Http404
    effective = None
    if request.POST.get("effective_from"):
        from django.utils.dateparse import parse_date

        effective = parse_date(request.POST["effective_from"])
        if effective is None:
            messages.error(request, _("The effective date must look like 2026-12-31."))
            return redirect("migration:cockpit")
    try:
        proposal = coefficient_proposal_decide(
            proposal=proposal, accept=verb == "accept", actor=request.user, effective_from=effective
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        if proposal.state == "accepted":
            messages.success(
                request,
                _(
                    "%(model)s: coefficient %(value)s from %(day)s; earlier metering and closed bills are unchanged."
                )
                % {
                    "model": proposal.device_model.name,
                    "value": proposal.proposed_value,
                    "day": proposal.effective_from,
                },
            )
        else:
            messages.success(request, _("Proposal dismissed."))
    return redirect("migration:cockpit")


@login_required
@require_safe
def service_detail(request: HttpRequest, pk: int) -> HttpResponse:
    user = request.user
    try:
        service = selectors.service_for_user(user=user, pk=pk)
    except NotFound:
        raise Http404 from None
    days, start, end = _window(request)
    tracks = selectors.track_comparison(service=service, start=start, end=end)
    series = selectors.metric_series(service=service, start=start, end=end)
    names = {
        "source": f"{selectors.vendor_label(service.source_vendor)} ({_('source')})",
        "target": f"{selectors.vendor_label(service.target_vendor)} ({_('target')})",
    }
    charts_html = {}
    if any(series.values()):
        charts_html = {
            "rps": _chart(
                charts.track_series_figure(series, "rps", y_title=_("Requests / s"), names=names),
                "migration-rps",
            ),
            "p99": _chart(
                charts.track_series_figure(series, "p99_ms", y_title=_("p99 latency (ms)"), names=names),
                "migration-p99",
            ),
            "errors": _chart(
                charts.track_series_figure(
                    series, "error_rate_pct", y_title=_("Error rate (%)"), names=names
                ),
                "migration-errors",
            ),
        }
    context = {
        "service": service,
        "days": days,
        "tracks": tracks,
        "charts": charts_html,
        "gates": [r.as_dict() for r in service_gate_results(service=service)],
        "actions": service.actions.select_related("actor")[:50],
        "eta": selectors.weight_eta(service),
        "can_steer": _can_steer(user, service),
        "validate_cap": service.plan.validate_max_target_weight,
    }
    return render(request, "migration/service_detail.html", context)


def _act(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    try:
        service = selectors.service_for_user(user=request.user, pk=pk)
    except NotFound:
        raise Http404 from None
    reason = request.POST.get("reason", "")[:500]
    try:
        if verb == "shift":
            weight = request.POST.get("target_weight") or None
            services.service_shift(
                service=service,
                actor=request.user,
                target_weight=weight,
                step=None if weight else request.POST.get("step") or None,
                reason=reason,
            )
            messages.success(request, _("Shifted: both Deployments are being re-applied."))
        elif verb == "rollback":
            services.service_rollback(
                service=service,
                actor=request.user,
                target_weight=request.POST.get("target_weight") or 0,
                reason=reason,
            )
            messages.success(request, _("Rolled back towards the source track."))
        else:
            services.service_promote(service=service, actor=request.user, reason=reason)
            messages.success(request, _("Promoted to the next phase."))
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("migration:service-detail", pk=pk)


@login_required
@require_POST
def service_shift(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, "shift")


@login_required
@require_POST
def service_rollback(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, "rollback")


@login_required
@require_POST
def service_promote(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, "promote")


def _csv(content: str, filename: str) -> HttpResponse:
    response = HttpResponse(content, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_safe
def export_services(request: HttpRequest) -> HttpResponse:
    _days, start, end = _window(request)
    qs = selectors.service_list(user=request.user)
    if request.GET.get("plan"):
        qs = qs.filter(plan_id=request.GET["plan"]) if request.GET["plan"].isdigit() else qs.none()
    return _csv(
        exports.services_csv(list(qs.order_by("plan__name", "name")), start=start, end=end),
        "migration-services.csv",
    )


@login_required
@require_safe
def export_vendor_share(request: HttpRequest) -> HttpResponse:
    months = selectors.vendor_share_by_month(user=request.user, months=12)
    return _csv(exports.vendor_share_csv(months), "migration-vendor-share.csv")
