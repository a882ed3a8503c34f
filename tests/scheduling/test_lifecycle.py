"""The job lifecycle and the job pages live in scheduling; the layers above fill the pages' slots.

Issue 16: job state changes above the bare transition have one owner (``apps.scheduling.lifecycle``),
the job pages and the job API moved out of the jobs layer with every URL name and path kept, and the
two things the pages show from above scheduling (telemetry's utilization curve, billing's cost per
hour) come through explicit extension slots filled in ``AppConfig.ready()``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import resolve, reverse
from django.utils import timezone

from apps.core.slots import Slot
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.scheduling import lifecycle
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards


def _submit(project, user, a100, **fields):
    fields.setdefault("name", "train")
    return submit_whole_cards(project, user, a100, image="pytorch:2.3", **fields)


# ------------------------------------------------------------------ URLs kept, modules moved


def test_the_job_pages_keep_their_names_and_paths_and_are_served_by_the_jobs_app():
    assert reverse("jobs:list") == "/jobs/"
    assert reverse("jobs:submit") == "/jobs/submit/"
    assert reverse("jobs:submit-preview") == "/jobs/submit/preview/"
    assert reverse("jobs:detail", kwargs={"pk": 7}) == "/jobs/7/"
    assert reverse("jobs:cancel", kwargs={"pk": 7}) == "/jobs/7/cancel/"
    assert reverse("jobs:runbook") == "/jobs/runbook/"
    match = resolve("/jobs/7/")
    assert match.namespace == "jobs" and match.func.__module__.startswith("apps.jobs.views.")


def test_the_job_api_keeps_its_paths_and_is_served_by_the_jobs_app():
    assert reverse("job-list") == "/api/jobs/jobs/"
    assert reverse("job-trace", kwargs={"pk": 7}) == "/api/jobs/jobs/7/trace/"
    assert reverse("job-cancel", kwargs={"pk": 7}) == "/api/jobs/jobs/7/cancel/"
    match = resolve("/api/jobs/jobs/7/allocations/")
    assert match.func.cls.__module__ == "apps.jobs.api.views"


# ------------------------------------------------------------------ extension slots


def test_a_slot_asks_its_providers_in_order_and_skips_empty_answers():
    slot = Slot("example")
    assert slot.first("job") is None  # nobody registered: nothing shown

    def empty(job):
        return ""

    def answer(job):
        return f"chart of {job}"

    def later(job):
        return "never asked"

    slot.register(empty)
    slot.register(answer)
    slot.register(answer)  # ready() may run twice: registered once
    slot.register(later)
    assert slot.providers == (empty, answer, later)
    assert slot.first("job-1") == "chart of job-1"


def test_the_job_pages_call_telemetry_and_billing_directly_without_slots():
    """The job pages are web modules: they import the upper layers' providers, no slot between."""
    from apps.billing.providers import job_cost_per_hour
    from apps.jobs.views import detail, submit
    from apps.telemetry.job_charts import job_utilization_chart

    assert detail.job_utilization_chart is job_utilization_chart
    assert submit.job_cost_per_hour is job_cost_per_hour


@pytest.mark.django_db
def test_the_job_page_shows_the_utilization_curve_telemetry_provides(client, fleet, member_project, a100):
    from apps.telemetry.models import JobUtilization, Quality

    user, project = member_project
    job = _submit(project, user, a100)
    scheduling_cycle_run()
    client.force_login(user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-utilization-chart"' not in page  # no telemetry yet: no chart, no plotly script
    assert "plotly-basic.min.js" not in page
    device = Allocation.objects.get(job=job).device
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=30)
    for k, busy in enumerate((40.0, 55.0)):
        JobUtilization.objects.create(
            job=job,
            device=device,
            window_start=start + timedelta(minutes=5 * k),
            source="test-exporter",
            quality=Quality.EXACT,
            share=1.0,
            busy_pct=busy,
            project_id_snapshot=project.pk,
        )
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-utilization-chart"' in page and "plotly-basic.min.js" in page


# ------------------------------------------------------------------ lifecycle owners


@pytest.mark.django_db
def test_a_push_failure_of_an_old_attempt_leaves_the_job_and_its_cards_alone(fleet, member_project, a100):
    user, project = member_project
    job = _submit(project, user, a100)
    scheduling_cycle_run()
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    assert not lifecycle.job_push_failed(job=job, attempt=job.attempt + 1, reason="stale", actor="pusher")
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 1

    assert lifecycle.job_push_failed(job=job, attempt=job.attempt, reason="image refused", actor="pusher")
    job.refresh_from_db()
    assert (job.state, job.attempt, job.state_reason) == (JobState.PENDING, 1, "image refused")
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert JobEvent.objects.filter(job=job, kind=JobEvent.Kind.RELEASED).count() == 1


@pytest.mark.django_db
def test_to_running_moves_a_scheduled_job_once(fleet, member_project, a100):
    user, project = member_project
    job = _submit(project, user, a100)
    assert not lifecycle.job_to_running(job=job, actor="reconciler")  # pending: not scheduled yet
    scheduling_cycle_run()
    job.refresh_from_db()
    assert lifecycle.job_to_running(job=job, actor="reconciler")
    assert not lifecycle.job_to_running(job=job, actor="reconciler")  # the second reconciler loses
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.started_at is not None
    assert Job.objects.get(pk=job.pk).events.filter(to_state=JobState.RUNNING).count() == 1


@pytest.mark.django_db
def test_submit_still_validates_pod_fields_as_kubernetes_does(fleet, member_project, a100):
    """apps.jobs.validation is called from the submit wherever it lives (here: the lifecycle)."""
    from apps.core.errors import ValidationFailed

    user, project = member_project
    with pytest.raises(ValidationFailed) as refused:
        _submit(project, user, a100, env={"1BAD": "x"})
    assert "env" in (refused.value.details or {})
    assert not Job.objects.exists()
