"""Quota pages: bars per project quota (guaranteed / used / borrowed), who borrows from whom, and one
project's history with the share of its guarantee used."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_safe

from apps.accounts.selectors import is_platform_staff, project_list
from apps.quotas import charts, selectors

HISTORY_DAYS = 30


@login_required
@require_safe
def quota_overview(request: HttpRequest) -> HttpResponse:
    user = request.user
    rows, flows = selectors.quota_usage(user=user)
    projects = list(project_list(user=user).filter(quotas__isnull=False).distinct().order_by("slug"))
    chosen = next(
        (p for p in projects if p.slug == request.GET.get("project")), projects[0] if projects else None
    )
    history_html = ""
    share = None
    if chosen is not None:
        end = timezone.now()
        start = end - dt.timedelta(days=HISTORY_DAYS)
        points = selectors.usage_history(project=chosen, start=start, end=end, step=dt.timedelta(hours=6))
        history_html = mark_safe(charts.history_html(points))  # noqa: S308 - plotly's own markup
        month_start = timezone.localtime(end).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        share = selectors.guarantee_share_used(project=chosen, start=month_start, end=end)
    departments = list(selectors.quota_list(user=user).filter(department__isnull=False))
    context = {
        "rows": rows,
        "flows": flows,
        "departments": departments,
        "bars_html": mark_safe(charts.quota_bars_html(rows)),  # noqa: S308 - plotly's own markup
        "projects": projects,
        "chosen": chosen,
        "history_html": history_html,
        "month_share": share,
        "history_days": HISTORY_DAYS,
        "is_staff": is_platform_staff(user),
    }
    return render(request, "quotas/overview.html", context)
