"""Quota pages: bars per project quota (guaranteed / used / borrowed), who borrows from whom, and one
project's history with the share of its guarantee used."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from apps.accounts.selectors import is_platform_staff, project_list
from apps.core.errors import ApplicationError, ValidationFailed
from apps.quotas import charts, selectors, services

HISTORY_DAYS = 30


@login_required
@require_safe
def quota_overview(request: HttpRequest) -> HttpResponse:
    return render(request, "quotas/overview.html", _overview_context(request))


def _overview_context(request: HttpRequest) -> dict:
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
    return context


# Quota.guaranteed_cu / borrowing_limit_cu: DecimalField(max_digits=10, decimal_places=4).
_MAX_CU = Decimal("999999.9999")


def _cu(value: str, *, field: str, blank_is_none: bool) -> Decimal | None:
    value = (value or "").strip().replace(",", ".")
    if not value:
        if blank_is_none:
            return None
        raise ValidationFailed(_("Enter a number of compute units."), details={field: ["required"]})
    try:
        number = Decimal(value)
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite():
        message = _("“%(value)s” is not a number of compute units.") % {"value": value}
    elif number < 0 or number > _MAX_CU:
        message = _("Compute units must be between 0 and %(max)s.") % {"max": _MAX_CU}
    elif number != number.quantize(Decimal("0.0001")):
        message = _("Compute units take at most 4 decimal places.")
    else:
        return number
    raise ValidationFailed(message, details={field: ["invalid"]})


@login_required
@require_POST
def quota_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Staff change a project quota's guaranteed CU and borrowing limit from the quotas page (through
    ``services.quota_update``: audited, department bound checked, ResourceQuota pushed). A blank
    borrowing limit means unlimited. Bad values: 400 with the reason, nothing written."""
    quota = get_object_or_404(selectors.quota_list(user=request.user).filter(project__isnull=False), pk=pk)
    if not is_platform_staff(request.user):
        raise PermissionDenied(_("Changing quotas is for platform staff only."))
    try:
        fields = {
            "guaranteed_cu": _cu(
                request.POST.get("guaranteed_cu", ""), field="guaranteed_cu", blank_is_none=False
            ),
            "borrowing_limit_cu": _cu(
                request.POST.get("borrowing_limit_cu", ""), field="borrowing_limit_cu", blank_is_none=True
            ),
        }
        services.quota_update(quota=quota, actor=request.user, **fields)
    except ApplicationError as exc:
        context = _overview_context(request)
        reasons = [
            str(reason)
            for field_reasons in (exc.details or {}).values()
            if isinstance(field_reasons, list)
            for reason in field_reasons
            if " " in str(reason)  # the services' sentences, not the bare codes above
        ]
        context["quota_error"] = {
            "pk": quota.pk,
            "message": exc.message,
            "reasons": reasons,
            "values": {k: request.POST.get(k, "") for k in ("guaranteed_cu", "borrowing_limit_cu")},
        }
        return render(request, "quotas/overview.html", context, status=exc.status_code)
    messages.success(request, _("Quota of %(project)s updated.") % {"project": quota.project.slug})
    return redirect("quotas:overview")
