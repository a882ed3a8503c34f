"""Billing pages: my bills (download), cost per month, cost per job; the staff ledger console.

Reads go through apps.billing.selectors (a member sees only their projects' bills and usage; another
project's bill is a 404). Console pages are for platform staff only (404 for anyone else) and write
through apps.billing.services; their errors become form errors or messages, never a 500.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Page, Paginator
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.billing import charts, exports, selectors, services
from apps.billing.filtersets import BillFilterSet, UsageEntryFilterSet
from apps.billing.forms import AdjustmentForm, MonthCloseForm, RateCardForm
from apps.billing.models import Bill, BillingPeriod, BillLine
from apps.core.errors import ApplicationError
from apps.core.filters import page_filter
from apps.core.paginators import CappedCountPaginator
from apps.core.permissions import staff_required
from apps.core.runs import run_progress_read

PAGE_SIZE = 50
# The filters each page's bar shows (the API's FilterSets take more).
BILL_FILTERS = ("month", "project")
LEDGER_FILTERS = ("q", "project", "month", "late")


def _query_without_page(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


def _filtered(filterset_class, request: HttpRequest, queryset, *, fields: tuple[str, ...]):
    """Apply the FilterSet the API uses to GET data: ``(rows, error, filter bar showing fields)``; a
    bad value (e.g. month "2026-13") becomes a message."""
    filterset, form = page_filter(filterset_class, request, queryset, fields=fields)
    try:
        return filterset.qs, "", form
    except ApplicationError as exc:
        return queryset.none(), exc.message, form


@login_required
@require_safe
def bill_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    bills, error, form = _filtered(
        BillFilterSet, request, selectors.bill_list(user=user), fields=BILL_FILTERS
    )
    if error:
        messages.error(request, error)
    page = Paginator(bills.order_by("-month", "project__name"), PAGE_SIZE).get_page(request.GET.get("page"))
    rows = selectors.cost_by_month(user=user)
    chart_html = ""
    if rows:
        figure = charts.cost_by_month_figure(selectors.months_by_project(rows), services.default_currency())
        # Plotly escapes the data it embeds; project names are stripped of markup.
        chart_html = mark_safe(charts.figure_html(figure, div_id="billing-cost-chart"))  # noqa: S308
    context = {
        "form": form,
        "page": page,
        "page_query": _query_without_page(request),
        "chart_html": chart_html,
        "month_rows": rows,
        "currency": services.default_currency(),
        "is_platform_staff": is_platform_staff(user),
        "has_projects": bool(user_project_ids(user)),
    }
    return render(request, "billing/bill_list.html", context)


@login_required
@require_safe
def bill_detail(request: HttpRequest, pk: int) -> HttpResponse:
    bill = get_object_or_404(selectors.bill_list(user=request.user).prefetch_related("lines"), pk=pk)
    lines = list(bill.lines.all())
    groups = [
        (value, label, [line for line in lines if line.group == value])
        for value, label in BillLine.Group.choices
    ]
    context = {
        "bill": bill,
        "groups": [g for g in groups if g[2]],
        "formats": list(exports.RENDERERS),
        "corrections": bill.corrections.all(),
    }
    return render(request, "billing/bill_detail.html", context)


@login_required
@require_safe
def bill_download(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    bill = get_object_or_404(selectors.bill_list(user=request.user).prefetch_related("lines"), pk=pk)
    if fmt not in exports.RENDERERS:
        raise Http404
    content, content_type, filename = exports.bill_export(bill, fmt)
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _job_cost_page(request: HttpRequest, month, number: int) -> tuple[list[dict], int]:
    return selectors.cost_by_job_page(user=request.user, month=month, number=number, per_page=PAGE_SIZE)


@login_required
@require_safe
def job_costs(request: HttpRequest) -> HttpResponse:
    month = None
    error = ""
    if request.GET.get("month"):
        try:
            month = services.parse_month(request.GET["month"])
        except ApplicationError as exc:
            error = exc.message
    if error:
        messages.error(request, error)
    # A page of jobs at a time (a month of a large fleet has a row per job that ran: issue 20), the
    # page and the count from one aggregate query; Paginator.get_page's rules (not a number: the first
    # page; under 1 or past the end: the last).
    try:
        number = int(request.GET.get("page") or 1)
    except ValueError:
        number = 1
    page_rows, total = ([], 0) if error or number < 1 else _job_cost_page(request, month, number)
    if number < 1 and not error:
        total = selectors.cost_by_job_rows(user=request.user, month=month).count()
    if not page_rows and total:
        number = (total + PAGE_SIZE - 1) // PAGE_SIZE
        page_rows, total = _job_cost_page(request, month, number)
    paginator = Paginator(range(total), PAGE_SIZE)
    page = Page(page_rows, min(number, paginator.num_pages), paginator)
    rows = selectors.cost_by_job(user=request.user, rows=page_rows)
    context = {
        "rows": rows,
        "page": page,
        "page_query": _query_without_page(request),
        "month": month,
        "form": page_filter(BillFilterSet, request, Bill.objects.none(), fields=("month",))[1],
        "currency": services.default_currency(),
    }
    return render(request, "billing/job_costs.html", context)


# ------------------------------------------------------------------ staff console


@staff_required(hide=True)
@require_safe
def console(request: HttpRequest) -> HttpResponse:
    previous = services.previous_month(services.current_month())
    form = MonthCloseForm(
        initial={"month": previous.strftime("%Y-%m"), "idle_policy": services.default_idle_policy()}
    )
    context = {
        "periods": selectors.period_list()[:24],
        "close_form": form,
        "adjustments": selectors.adjustment_list(user=request.user)[:10],
        "rate_cards": selectors.rate_card_list()[:10],
    }
    return render(request, "billing/console.html", context)


@staff_required(hide=True)
@require_POST
def console_close(request: HttpRequest) -> HttpResponse:
    form = MonthCloseForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Give a month (YYYY-MM) and an idle-cost policy."))
        return redirect("billing:console")
    try:
        month = services.parse_month(form.cleaned_data["month"])
        with transaction.atomic():
            period = services.month_close_start(
                month=month, actor=request.user, idle_policy=form.cleaned_data["idle_policy"]
            )
            if period.state != BillingPeriod.State.CLOSED:
                services.month_close_enqueue(period=period, finalize=form.cleaned_data["finalize"])
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("billing:console")
    if period.state == BillingPeriod.State.CLOSED:
        messages.info(request, _("%(month)s is already closed; nothing changed.") % {"month": period.label})
    else:
        messages.success(
            request, _("Closing %(month)s: the billing worker builds the bills.") % {"month": period.label}
        )
    return redirect("billing:period-progress", pk=period.pk)


@staff_required(hide=True)
@require_safe
def period_progress(request: HttpRequest, pk: int) -> HttpResponse:
    period = get_object_or_404(selectors.period_list(), pk=pk)
    bills = period.bills.select_related("project").order_by("project__name")
    context = {
        "period": period,
        "bills": bills,
        "run": period.close_run,
        "progress": run_progress_read(period.close_run) if period.close_run else None,
    }
    return render(request, "billing/period_progress.html", context)


@staff_required(hide=True)
@require_safe
def period_export(request: HttpRequest, pk: int) -> HttpResponse:
    period = get_object_or_404(BillingPeriod, pk=pk)
    response = HttpResponse(exports.month_export_zip(period), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="bills-{period.label}.zip"'
    return response


@staff_required(hide=True)
@require_safe
def ledger(request: HttpRequest) -> HttpResponse:
    entries, error, form = _filtered(
        UsageEntryFilterSet, request, selectors.usage_entry_list(user=request.user), fields=LEDGER_FILTERS
    )
    if error:
        messages.error(request, error)
    # The ledger grows by an entry per allocation-hour: its count is estimated when unfiltered (issue 20).
    page = CappedCountPaginator(entries.order_by("-slice_start", "-id"), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "billing/ledger.html",
        {"form": form, "page": page, "page_query": _query_without_page(request)},
    )


@staff_required(hide=True)
@require_http_methods(["GET", "POST"])
def adjustments(request: HttpRequest) -> HttpResponse:
    form = AdjustmentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        bill = None
        try:
            if data.get("corrects_bill"):
                bill = Bill.objects.filter(pk=data["corrects_bill"]).first()
                if bill is None:
                    raise ValidationError({"corrects_bill": _("No such bill.")})
            adjustment = services.adjustment_create(
                project=data["project"],
                amount=data["amount"],
                reason=data["reason"],
                corrects_bill=bill,
                actor=request.user,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        except ApplicationError as exc:
            for field, errors in (exc.details or {}).items():
                if field in form.fields:
                    form.add_error(field, errors)
            if not form.errors:
                form.add_error(None, exc.message)
        else:
            messages.success(
                request,
                _("Adjustment of %(amount)s recorded for %(month)s.")
                % {"amount": adjustment.amount, "month": adjustment.month.strftime("%Y-%m")},
            )
            return redirect("billing:adjustments")
    page = Paginator(selectors.adjustment_list(user=request.user), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render(request, "billing/adjustments.html", {"form": form, "page": page, "page_query": ""})


@staff_required(hide=True)
@require_http_methods(["GET", "POST"])
def rate_cards(request: HttpRequest) -> HttpResponse:
    form = RateCardForm(request.POST or None, initial={"currency": services.default_currency()})
    if request.method == "POST" and form.is_valid():
        try:
            card = services.rate_card_create(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, _("Rate card %(name)s created.") % {"name": card.name})
            return redirect("billing:rate-cards")
    return render(request, "billing/rate_cards.html", {"form": form, "cards": selectors.rate_card_list()})
