"""Issue 21 §3: the submit preview runs the same admission and precheck as the submit — what the
preview calls ready is accepted, what it refuses is refused, with the same reason."""

from __future__ import annotations

import pytest

from apps.core.errors import ApplicationError
from apps.jobs.models import Job
from tests.fixtures.jobs import submit_whole_cards
from tests.fixtures.quotas import quota
from tests.jobs.test_pages import form_data

pytestmark = pytest.mark.usefixtures("english")


def test_a_request_over_the_borrowing_ceiling_is_refused_by_the_preview_too(
    client, fleet, member_project, a100, staff_user
):
    user, project = member_project
    quota(
        staff_user,
        project=project,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=5.5,
        borrowing_limit_cu=0,
    )
    client.force_login(user)
    data = form_data(project, device_model=a100.pk, count=3, replicas=2)
    body = client.post("/jobs/submit/preview/", data).json()
    assert body["valid"] is False and not body["placed_now"], body
    assert "quota_refusal" in body, body
    assert "5.5" in body["quota_refusal"]
    with pytest.raises(ApplicationError) as exc:
        submit_whole_cards(project, user, a100, 3, name="x", image="x:1", replicas=2)
    assert exc.value.message == body["quota_refusal"]
    assert not Job.objects.exists()


def test_a_runtime_no_driver_supports_is_refused_at_submit_and_in_the_preview(
    client, fleet, member_project, a100
):
    user, project = member_project
    client.force_login(user)
    body = client.post(
        "/jobs/submit/preview/", form_data(project, device_model=a100.pk, runtime_requirement="cuda 13.5")
    ).json()
    assert body["feasible"]["ok"] is False and body["valid"] is False
    with pytest.raises(ApplicationError) as exc:
        submit_whole_cards(project, user, a100, name="x", image="x:1", runtime_requirement="cuda 13.5")
    assert exc.value.status_code == 400 and "13.5" in exc.value.message
    assert not Job.objects.exists()
    # A runtime one node supports is accepted (it waits for that node if it is busy).
    job = submit_whole_cards(project, user, a100, name="ok", image="x:1", runtime_requirement="cuda 12.4")
    assert job.state == "pending"
