"""The admin console for jobs, allocations and decision traces: read-only state, service-backed cancel."""

from __future__ import annotations

import pytest

from apps.core.models import ChangeRecord
from apps.jobs.models import Allocation, JobState
from apps.scheduling.models import DecisionTrace
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]


@pytest.fixture
def scheduled(fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(project, user, a100, 2, name="llm", image="pytorch:2.3")
    waiting = submit_whole_cards(
        project, user, a100, 4, name="big", image="pytorch:2.3", runtime_requirement="cuda 12.4"
    )
    other = submit_whole_cards(
        project, user, a100, 4, name="big2", image="pytorch:2.3", runtime_requirement="cuda 12.4"
    )
    scheduling_cycle_run()
    for j in (job, waiting, other):
        j.refresh_from_db()
    return job, other if other.state == JobState.PENDING else waiting


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


def test_non_staff_cannot_open_the_admin(client, member_project):
    user, _project = member_project
    client.force_login(user)
    response = client.get("/admin/jobs/job/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_job_changelist_filters_and_search(staff_client, scheduled):
    job, waiting = scheduled
    response = staff_client.get("/admin/jobs/job/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "llm" in body and "big" in body
    filtered = staff_client.get("/admin/jobs/job/", {"state__exact": "scheduled"}).content.decode()
    assert ">llm<" in filtered and f">{waiting.name}<" not in filtered
    searched = staff_client.get("/admin/jobs/job/", {"q": "big2"}).content.decode()
    assert "big2" in searched and ">llm<" not in searched


def test_job_changelist_query_count_is_constant(staff_client, scheduled, member_project, a100):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as small:
        staff_client.get("/admin/jobs/job/")
    user, project = member_project
    for i in range(10):
        submit_whole_cards(project, user, a100, name=f"more{i}")
    with CaptureQueriesContext(connection) as large:
        staff_client.get("/admin/jobs/job/")
    assert len(large.captured_queries) == len(small.captured_queries)


def test_job_state_is_read_only_and_events_are_inline(staff_client, scheduled):
    job, _waiting = scheduled
    response = staff_client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'name="state"' not in body and 'name="request_kind"' not in body
    assert 'name="name"' in body  # a harmless field stays editable
    assert "scheduled on" in body  # the JobEvent inline
    assert 'name="events-0-message"' not in body


def test_editing_a_job_cannot_change_its_state(staff_client, scheduled):
    job, _waiting = scheduled
    url = f"/admin/jobs/job/{job.pk}/change/"
    data = {
        "name": "llm-renamed",
        "checkpoint_dir": "/ckpt",
        "expected_duration_s": "",
        "max_retries": "2",
        "retry_backoff_s": "60",
        "state": "succeeded",  # ignored: read-only
        "events-TOTAL_FORMS": "0",
        "events-INITIAL_FORMS": "0",
        "events-MIN_NUM_FORMS": "0",
        "events-MAX_NUM_FORMS": "0",
    }
    response = staff_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    job.refresh_from_db()
    assert job.name == "llm-renamed" and job.max_retries == 2 and job.state == JobState.SCHEDULED
    record = ChangeRecord.objects.get(action="job.admin_edit")
    assert record.before["name"] == "llm" and record.after["name"] == "llm-renamed"


def test_jobs_cannot_be_added_or_deleted_in_the_admin(staff_client, scheduled):
    job, _waiting = scheduled
    assert staff_client.get("/admin/jobs/job/add/").status_code == 403
    assert staff_client.get(f"/admin/jobs/job/{job.pk}/delete/").status_code == 403


def test_the_cancel_action_goes_through_the_service(staff_client, scheduled):
    job, waiting = scheduled
    response = staff_client.post(
        "/admin/jobs/job/",
        {"action": "cancel_jobs", "_selected_action": [job.pk, waiting.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Jobs cancelled: 2" in response.content.decode()
    job.refresh_from_db()
    waiting.refresh_from_db()
    assert job.state == waiting.state == JobState.CANCELLED
    # Issue 17: the workload was queued for Kubernetes, so its cards stay held ("releasing") until the
    # deletion is confirmed; none is live for the job any more.
    live = Allocation.objects.filter(job=job, released_at__isnull=True)
    assert live.exists() and not live.filter(releasing_since__isnull=True).exists()


def test_allocation_admin_is_read_only_with_filters(staff_client, scheduled):
    job, _waiting = scheduled
    allocation = Allocation.objects.filter(job=job).first()
    listing = staff_client.get("/admin/jobs/allocation/")
    assert listing.status_code == 200 and "llm" in listing.content.decode()
    active = staff_client.get("/admin/jobs/allocation/", {"active": "yes"}).content.decode()
    released = staff_client.get("/admin/jobs/allocation/", {"active": "no"}).content.decode()
    assert "llm" in active and "0 allocations" in released
    by_node = staff_client.get("/admin/jobs/allocation/", {"node__id__exact": allocation.node_id})
    assert by_node.status_code == 200
    by_job = staff_client.get("/admin/jobs/allocation/", {"job__id__exact": job.pk})
    assert by_job.status_code == 200 and "llm" in by_job.content.decode()
    change = staff_client.get(f"/admin/jobs/allocation/{allocation.pk}/change/")
    assert change.status_code == 200 and 'name="memory_mib"' not in change.content.decode()
    assert staff_client.get("/admin/jobs/allocation/add/").status_code == 403
    assert staff_client.post(f"/admin/jobs/allocation/{allocation.pk}/delete/").status_code == 403


def test_decision_trace_admin_pretty_prints_the_steps(staff_client, scheduled):
    job, waiting = scheduled
    trace = DecisionTrace.objects.filter(job=job, outcome="placed").first()
    listing = staff_client.get("/admin/scheduling/decisiontrace/", {"outcome__exact": "pending"})
    assert listing.status_code == 200
    response = staff_client.get(f"/admin/scheduling/decisiontrace/{trace.pk}/change/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "<pre" in body and "&quot;tier&quot;: &quot;result&quot;" in body
    assert "placed on" in body
    assert staff_client.get("/admin/scheduling/decisiontrace/add/").status_code == 403
