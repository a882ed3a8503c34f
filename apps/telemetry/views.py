"""Telemetry pages: the fleet utilization report (staff), project and job utilization (members).

A member opening /telemetry/ sees their projects; fleet-wide figures are for staff only. A project
or job the user cannot see is a 404, never a 403.
"""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_safe

from apps.accounts.selectors import is_platform_staff
from apps.core.errors import NotFound, ValidationFailed
from apps.core.models import BackgroundRun
from apps.core.runs import run_progress_read
from apps.telemetry import charts, selectors
from apps.telemetry.forms import ComparisonForm, FleetReportForm, PeriodForm

API = "/api/telemetry/"
# The fleet page lists the first idle cards (node, index order); the CSV export has them all.
IDLE_CARDS_SHOWN = 50


def _chart(fig, div_id: str) -> str:
    # Plotly escapes the data it embeds; group names are stripped of markup (charts._plain).
    return mark_safe(charts.figure_html(fig, div_id=div_id))  # noqa: S308


def _query(request: HttpRequest, **extra: str) -> str:
    query: QueryDict = request.GET.copy()
    for key, value in extra.items():
        query[key] = value
    return query.urlencode()


def _period(form: PeriodForm, default_hours: int = 24) -> tuple[selectors.Period, str]:
    values = form.cleaned()
    try:
        return selectors.period_parse(values.get("start"), values.get("end"), default_hours=default_hours), ""
    except ValidationFailed as exc:
        return selectors.period_parse(None, None, default_hours=default_hours), exc.message


@login_required
@require_safe
def dashboard(request: HttpRequest) -> HttpResponse:
    user = request.user
    if not is_platform_staff(user):
        period = selectors.period_parse(None, None, default_hours=24 * 7)
        projects = [
            {"project": project, "report": report}
            for project, report in selectors.project_summaries(user=user, period=period)
        ]
        return render(request, "telemetry/projects.html", {"projects": projects, "period": period})
    form = FleetReportForm(request.GET)
    period, error = _period(form)
    group_by = form.cleaned().get("group_by") or "vendor"
    fleet = selectors.fleet_utilization(user=user, period=period, group_by=group_by)
    figures = selectors.three_figures(user=user, period=period)
    idle = selectors.idle_cards(user=user, period=period, limit=IDLE_CARDS_SHOWN + 1)  # one more: "more"
    comparison = None
    comparison_form = ComparisonForm(request.GET if "baseline_start" in request.GET else None)
    if comparison_form.is_bound and comparison_form.is_valid():
        c = comparison_form.cleaned_data
        try:
            comparison = selectors.period_comparison(
                user=user,
                baseline=selectors.period_parse(c["baseline_start"], c["baseline_end"]),
                current=selectors.period_parse(c.get("current_start"), c.get("current_end")),
            )
        except ValidationFailed as exc:
            comparison_form.add_error(None, exc.message)
    context = {
        "form": form,
        "error": error,
        "period": period,
        "fleet": fleet,
        "fleet_chart": _chart(charts.utilization_figure(fleet["series"]), "telemetry-fleet-chart")
        if fleet["series"]
        else "",
        "figures": figures,
        "figures_chart": _chart(charts.figures_figure(figures), "telemetry-figures-chart"),
        "top_nodes": selectors.top_nodes(user=user, period=period),
        "idle_cards": idle[:IDLE_CARDS_SHOWN],
        "idle_cards_more": len(idle) > IDLE_CARDS_SHOWN,
        "fragmentation": selectors.fragmentation(user=user),
        "comparison_form": comparison_form,
        "comparison": comparison,
        "exports": {
            name.replace(
                "-", "_"
            ): f"{API}reports/{name}/?{_query(request, format='csv', start=period.start.isoformat(), end=period.end.isoformat())}"
            for name in ("fleet", "top-nodes", "idle-cards", "figures", "fragmentation")
        },
        "comparison_export": f"{API}reports/comparison/?{_query(request, format='csv')}"
        if comparison
        else "",
    }
    return render(request, "telemetry/fleet.html", context)


@login_required
@require_safe
def project_detail(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        selectors.project_for_user(user=request.user, pk=pk)  # visibility (404) before the query string
    except NotFound:
        raise Http404 from None
    form = PeriodForm(request.GET)
    period, error = _period(form, default_hours=24 * 7)
    report = selectors.project_utilization(user=request.user, pk=pk, period=period)
    context = {
        "form": form,
        "error": error,
        "report": report,
        "period": period,
        "chart": _chart(charts.curve_figure(report["points"], name=report["slug"]), "telemetry-project-chart")
        if report["points"]
        else "",
        "export_csv_url": f"{API}projects/{pk}/?{_query(request, format='csv', start=period.start.isoformat(), end=period.end.isoformat())}",
    }
    return render(request, "telemetry/project.html", context)


@login_required
@require_safe
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        report = selectors.job_utilization(user=request.user, pk=pk)
    except NotFound:
        raise Http404 from None
    context = {
        "report": report,
        "chart": _chart(charts.curve_figure(report["points"], name=report["name"]), "telemetry-job-chart")
        if report["points"]
        else "",
        "export_csv_url": f"{API}jobs/{pk}/?format=csv",
    }
    return render(request, "telemetry/job.html", context)


@staff_member_required
def backfill_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """A metric backfill: its progress (polled at /runs/<id>/), then its report."""
    from django.utils.dateparse import parse_datetime

    from apps.telemetry.metric_sources import BACKFILL_RUN_KIND
    from apps.telemetry.models import MetricSource

    run = get_object_or_404(BackgroundRun, pk=pk, kind=BACKFILL_RUN_KIND)
    params = run.params
    source = MetricSource.objects.select_related("cluster").filter(pk=params.get("source")).first()
    context = {
        "run": run,
        "progress": run_progress_read(run),
        "source": source or params.get("source_name", ""),
        "start": parse_datetime(params.get("start", "")),
        "end": parse_datetime(params.get("end", "")),
        "report": run.result,
    }
    return render(request, "telemetry/backfill.html", context)
