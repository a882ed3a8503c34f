"""The job list: filters, sort, CSV export, the rows it shows (also rendered live) and bulk cancel."""

from __future__ import annotations

from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Page
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from apps.accounts.models import Membership
from apps.accounts.selectors import is_platform_staff
from apps.core import live as live_sections
from apps.core.errors import ApplicationError
from apps.core.filters import page_filter
from apps.core.paginators import EstimatedCountPaginator
from apps.jobs import selectors
from apps.jobs.filtersets import JobPageFilterSet
from apps.jobs.forms import submittable_projects
from apps.jobs.models import (
    FINAL_STATES,
    Allocation,
    Job,
)
from apps.jobs.views.common import CANCEL_ROLES, STATE_TONES
from apps.scheduling import eta, lifecycle
from apps.scheduling.resource_requests import (
    request_describe,
)

PAGE_SIZE = 50

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


def _paginate(request: HttpRequest, qs) -> Page:
    """The page of ``qs`` asked for. Estimated count over the whole unfiltered job table (issue 20);
    exact whenever filtered. The page's ids are found first (one index read, however deep the page)
    and only those rows are read with their related rows: an OFFSET over the full query joined the
    project, template, model and submitter of every row it skipped (page 100: 4,950 of them)."""
    page = EstimatedCountPaginator(qs.values_list("pk", flat=True), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    ids = list(page.object_list)
    rows = qs.order_by().in_bulk(ids)
    page.object_list = [rows[pk] for pk in ids if pk in rows]
    return page


def _query_without_page(request: HttpRequest) -> str:
    query: QueryDict = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


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
    rows = live_sections.render_sections(request, "jobs/_job_row.html", [{"job": job} for job in jobs])
    for job, row in zip(jobs, rows, strict=True):
        job.live_row = row
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
