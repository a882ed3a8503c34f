"""Job reads, scoped to the user's projects."""

from __future__ import annotations

from django.db.models import QuerySet

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.jobs.models import Job


def job_list(*, user) -> QuerySet[Job]:
    qs = Job.objects.select_related(
        "project", "template", "template__device_model", "device_model", "request_template", "submitted_by"
    )
    if is_platform_staff(user):
        return qs
    project_ids = user_project_ids(user)
    if not project_ids:
        return qs.none()
    return qs.filter(project_id__in=project_ids)
