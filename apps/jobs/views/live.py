"""JSON for live pages (issues 21 and 29 §2): the job page and the job list poll it
(``static/js/live.js``) and update without a reload.

``GET /jobs/live/?ids=1,2,3`` answers the state of each listed job the user can see (others are left
out, so it confirms nothing about them)::

    {"fields": {"job-1-state": {"text": "running", "tone": "ok", "value": "running"}, ...}}

``&sections=job-1-why,job-1-allocations,job-2-row`` adds those server-rendered sections
(``apps.core.live``): a part of the job page (``apps.jobs.views.detail.JOB_SECTIONS``: reason, actions, runbook,
facts, why, allocations, timeline) or a row of the job list (``row``), each
``{"version", "html"}`` from the same partial the page includes. A section of a job the reader cannot
see, or of an unknown part, is absent. A name that is not a section name at all is a 400.
"""

from __future__ import annotations

import re

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from apps.core import live as live_sections
from apps.jobs import selectors
from apps.jobs.models import JobState
from apps.jobs.views.common import STATE_TONES
from apps.jobs.views.detail import JOB_SECTIONS, job_sections
from apps.jobs.views.listing import job_rows

MAX_IDS = 200  # a page of the job list is smaller
# Job pages whose sections one poll may ask for (a page shows one job; each costs a "why pending").
MAX_DETAIL_JOBS = 5
SECTION_NAME = re.compile(r"^job-(\d{1,12})-([a-z]+)$")
ROW = "row"


def _ids(raw: str) -> list[int] | None:
    ids = []
    for part in (raw or "").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or len(part) > 12:
            return None
        ids.append(int(part))
    return ids[:MAX_IDS]


def _wanted_sections(names: list[str]) -> dict[int, list[str]]:
    wanted: dict[int, list[str]] = {}
    for name in names:
        match = SECTION_NAME.match(name)
        if match and (match[2] in JOB_SECTIONS or match[2] == ROW):
            wanted.setdefault(int(match[1]), []).append(match[2])
    return wanted


@never_cache
@login_required
@require_safe
def job_states(request: HttpRequest) -> JsonResponse:
    ids = _ids(request.GET.get("ids", ""))
    if ids is None:
        return JsonResponse(
            {"error": "invalid", "message": _("ids must be job ids separated by commas.")}, status=400
        )
    try:
        names = live_sections.requested_sections(request)
    except live_sections.SectionsInvalid:
        return live_sections.sections_invalid_response()
    wanted = _wanted_sections(names)
    labels = dict(JobState.choices)
    fields = {}
    listed = set(ids)
    jobs = list(selectors.job_list(user=request.user).filter(pk__in=listed | set(wanted)))
    for job in jobs:
        if job.pk not in listed:
            continue
        fields[f"job-{job.pk}-state"] = {
            "text": str(labels.get(job.state, job.state)),
            "tone": STATE_TONES.get(job.state, "muted"),
            "value": job.state,
        }
    body: dict = {"fields": fields}
    if wanted:
        sections = {}
        for job in job_rows(request, [j for j in jobs if ROW in wanted.get(j.pk, ())]):
            sections[f"job-{job.pk}-{ROW}"] = job.live_row
        detail = [j for j in jobs if any(p != ROW for p in wanted.get(j.pk, ()))][:MAX_DETAIL_JOBS]
        for job in detail:
            parts = [p for p in wanted[job.pk] if p != ROW]
            for part, section in job_sections(request, job, parts).items():
                sections[f"job-{job.pk}-{part}"] = section
        body["sections"] = sections
    return JsonResponse(body)
