"""JSON for live pages (issue 21): the job page and the job list poll it (``static/js/live.js``) and
update their state badges without a reload.

``GET /jobs/live/?ids=1,2,3`` answers the state of each listed job the user can see (others are left
out, so it confirms nothing about them)::

    {"fields": {"job-1-state": {"text": "running", "tone": "ok", "value": "running"}, ...}}
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from apps.jobs import selectors
from apps.jobs.models import JobState

MAX_IDS = 200  # a page of the job list is smaller
# Badge tones per job state (the classes of suanchi.css; same as the pages').
STATE_TONES = {
    JobState.PENDING: "info",
    JobState.ADMITTED: "info",
    JobState.SCHEDULED: "accent",
    JobState.RUNNING: "ok",
    JobState.SUCCEEDED: "ok",
    JobState.FAILED: "bad",
    JobState.PREEMPTED: "warn",
    JobState.CANCELLED: "muted",
}


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


@never_cache
@login_required
@require_safe
def job_states(request: HttpRequest) -> JsonResponse:
    ids = _ids(request.GET.get("ids", ""))
    if ids is None:
        return JsonResponse(
            {"error": "invalid", "message": _("ids must be job ids separated by commas.")}, status=400
        )
    labels = dict(JobState.choices)
    fields = {}
    rows = selectors.job_list(user=request.user).filter(pk__in=ids).values_list("pk", "state")
    for pk, state in rows:
        fields[f"job-{pk}-state"] = {
            "text": str(labels.get(state, state)),
            "tone": STATE_TONES.get(state, "muted"),
            "value": state,
        }
    return JsonResponse({"fields": fields})
