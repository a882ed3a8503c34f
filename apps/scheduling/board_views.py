"""The queue board page (issue 29 §7), mounted at /quotas/board/ (namespace "queueboard",
``apps.scheduling.board_urls``): it lives in scheduling because it reads the scheduler's reasons and
preemptions (``apps.scheduling.board``), and sits beside the quotas page, whose figures it extends.

Query parameters, each checked against what the reader may see (a bad one is a 400 with the reason,
the board shown unfiltered below it, never a 500): ``project`` (the "why is my share X?" panel),
``department`` (only that department's rows) and ``category`` (only those starved jobs).
"""

from __future__ import annotations

import re

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_safe

from apps.accounts.selectors import project_list
from apps.quotas import charts
from apps.quotas.selectors import queue_positions
from apps.scheduling import board as queue_board
from apps.scheduling import eta

_SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")


class BadQuery(ValueError):
    pass


def _choice(request: HttpRequest, name: str, allowed: set[str], message: str) -> str:
    values = request.GET.getlist(name)
    if not values or values == [""]:
        return ""
    if len(values) > 1:
        raise BadQuery(_("Give %(name)s once.") % {"name": name})
    value = values[0]
    if not _SLUG.fullmatch(value) or value not in allowed:
        raise BadQuery(message % {"value": value[:60]})
    return value


@login_required
@require_safe
def board(request: HttpRequest) -> HttpResponse:
    user = request.user
    visible = list(project_list(user=user).order_by("department__name", "slug"))
    slugs = {p.slug for p in visible}
    departments = {p.department.slug for p in visible}
    errors = []
    chosen = {}
    for name, allowed, message in (
        ("project", slugs, _("No project “%(value)s” among the projects you can see.")),
        ("department", departments, _("No department “%(value)s” among the departments of your projects.")),
        (
            "category",
            set(queue_board.CATEGORIES),
            _("Unknown reason category “%(value)s”: choose one of quota, device, topology, vendor, other."),
        ),
    ):
        try:
            chosen[name] = _choice(request, name, allowed, message)
        except BadQuery as exc:
            errors.append(str(exc))
            chosen[name] = ""
    data = queue_board.queue_board(user=user, department=chosen["department"] or None)
    row = data.row(chosen["project"]) if chosen["project"] else None
    if row is None and data.rows:
        # None chosen (or not in the chosen department): the reader's busiest project, the one with
        # the most waiting jobs, then the most running.
        row = sorted(data.rows, key=lambda r: (-r.queued_jobs, -r.running_cu, r.project.slug))[0]
    why = []
    if row is not None:
        position = None
        if row.first_queued is not None:
            if data.staff:
                position = queue_positions([row.first_queued.pk], shares=data.shares).get(row.first_queued.pk)
            else:
                position = eta.visible_queue_positions(user, [row.first_queued]).get(row.first_queued.pk)
        why = queue_board.explain_share(data, row, position=position)
    starved = [g for g in data.starved if not chosen["category"] or g.category == chosen["category"]]
    context = {
        "board": data,
        "rows": data.rows,
        "starved": starved,
        "chosen": row,
        "why": why,
        "filters": chosen,
        "projects": visible
        if not chosen["department"]
        else [p for p in visible if p.department.slug == chosen["department"]],
        "department_choices": sorted(
            {(p.department.slug, p.department.name) for p in visible}, key=lambda d: d[1]
        ),
        "categories": [(c, queue_board.CATEGORY_LABELS[c]) for c in queue_board.CATEGORIES],
        "cause_labels": queue_board.PREEMPTION_CAUSES,
        "chart_html": mark_safe(charts.share_vs_use_html(data.rows)),  # noqa: S308 - plotly's own markup
        "errors": errors,
    }
    return render(request, "quotas/board.html", context, status=400 if errors else 200)
