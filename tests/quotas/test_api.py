"""The quota API and pages: staff write, members read; bad input is a precise 400 and writes nothing;
ResourceQuota objects are rendered in the vendors' resource names and written to the push outbox."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import kubernetes_validate
import pytest

from apps.clusters.models import PushAction
from apps.core.models import ChangeRecord
from apps.jobs.models import Job
from apps.quotas.models import Quota
from apps.quotas.services import resource_quota_render
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.quotas import cards, quota

pytestmark = pytest.mark.django_db
URL = "/api/quotas/quotas/"


def post(client, body):
    return client.post(URL, body, format="json")


def details(response) -> dict:
    return response.json()["error"]["details"]


@pytest.fixture
def staff_client(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    return api_client


def test_staff_create_a_department_and_project_quotas_and_members_read_theirs(
    staff_client, api_client, fleet, two_projects, research
):
    user, vision, nlp = two_projects
    r = post(
        staff_client,
        {"department": "research", "resource_class": "vendor", "vendor": "nvidia", "guaranteed_cu": "6"},
    )
    assert r.status_code == 201, r.content
    r = post(
        staff_client,
        {
            "project": "vision",
            "resource_class": "vendor",
            "vendor": "nvidia",
            "guaranteed_cu": "4",
            "borrowing_limit_cu": "2",
            "lending_windows": [{"start": "22:00", "end": "08:00"}],
        },
    )
    assert r.status_code == 201, r.content
    body = r.json()
    assert (
        body["project"] == "vision"
        and body["class_key"] == "vendor:nvidia"
        and body["time_zone"] == "Asia/Shanghai"
    )
    assert ChangeRecord.objects.filter(action="quota.create").count() == 2
    updated = staff_client.patch(f"{URL}{body['id']}/", {"borrowing_limit_cu": "3"}, format="json")
    assert updated.status_code == 200 and updated.json()["borrowing_limit_cu"] == "3.0000"
    # A member of vision sees vision's quota and its department's, not another department's.
    api_client.force_authenticate(user)
    listed = api_client.get(URL).json()
    assert {(q["project"], q["department"]) for q in listed["results"]} == {
        ("vision", None),
        (None, "research"),
    }
    # Members' 403 on writes and outsiders' empty list: tests/quotas/test_api_contract.py.


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (
            {"project": "vision", "resource_class": "vendor", "vendor": "nvidia", "guaranteed_cu": "5"},
            "guaranteed_cu",
            "Projects of department research would be guaranteed 5 CU of NVIDIA, more than the department's 4 CU.",
        ),
        ({"project": "vision", "guaranteed_cu": "-1"}, "guaranteed_cu", "The guarantee cannot be negative."),
        (
            {"project": "vision", "guaranteed_cu": "2", "borrowing_limit_cu": "-1"},
            "borrowing_limit_cu",
            "The borrowing limit cannot be negative; leave it empty for no limit.",
        ),
        (
            {"project": "vision", "guaranteed_cu": "0", "borrowing_limit_cu": "0"},
            "guaranteed_cu",
            "A quota with no guarantee and a zero borrowing limit admits nothing; give a positive guarantee or borrowing limit.",
        ),
        (
            {"project": "vision", "guaranteed_cu": "2", "lending_limit_cu": "3"},
            "lending_limit_cu",
            "The lending limit cannot exceed the guarantee.",
        ),
        (
            {"project": "vision", "guaranteed_cu": "2", "over_quota_weight": "0"},
            "over_quota_weight",
            "The over-quota weight must be positive.",
        ),
        (
            {"project": "vision", "guaranteed_cu": "2", "memory_limit_mib": 0},
            "memory_limit_mib",
            "The memory limit must be positive; leave it empty for none.",
        ),
        (
            {
                "project": "vision",
                "guaranteed_cu": "2",
                "lending_windows": [{"start": "22:00", "end": "08:00"}, {"start": "07:00", "end": "09:00"}],
            },
            "lending_windows",
            "Windows 1 and 2 overlap.",
        ),
        (
            {
                "project": "vision",
                "guaranteed_cu": "2",
                "lending_windows": [{"start": "25:00", "end": "08:00"}],
            },
            "lending_windows",
            "window 1: '25:00' is not a time of day HH:MM",
        ),
        (
            {"project": "vision", "guaranteed_cu": "2", "time_zone": "Mars/Olympus"},
            "time_zone",
            "Unknown time zone 'Mars/Olympus'.",
        ),
        (
            {"project": "vision", "resource_class": "vendor", "guaranteed_cu": "2"},
            "vendor",
            "Choose the vendor this quota covers.",
        ),
        (
            {"project": "vision", "department": "research", "guaranteed_cu": "2"},
            "project",
            "A quota belongs to exactly one department or one project.",
        ),
    ],
)
def test_bad_quotas_are_400_with_the_field_and_nothing_is_written(
    staff_client, fleet, two_projects, research, staff_user, body, field, message
):
    quota(staff_user, department=research, resource_class="vendor", vendor="nvidia", guaranteed_cu=4)
    quotas, records, pushes = Quota.objects.count(), ChangeRecord.objects.count(), PushAction.objects.count()
    response = post(staff_client, body)
    assert response.status_code == 400, response.content
    assert details(response)[field] == [message]
    assert (Quota.objects.count(), ChangeRecord.objects.count(), PushAction.objects.count()) == (
        quotas,
        records,
        pushes,
    )


def test_a_department_guarantee_cannot_drop_below_its_projects(
    staff_client, fleet, two_projects, research, staff_user
):
    user, vision, nlp = two_projects
    dept = quota(staff_user, department=research, resource_class="any", guaranteed_cu=8)
    quota(staff_user, project=vision, resource_class="any", guaranteed_cu=3)
    quota(staff_user, project=nlp, resource_class="any", guaranteed_cu=3)
    response = staff_client.patch(f"{URL}{dept.pk}/", {"guaranteed_cu": "5"}, format="json")
    assert response.status_code == 400
    assert details(response)["guaranteed_cu"] == [
        "Its projects are already guaranteed 6 CU of any accelerator; the department's guarantee cannot be lower."
    ]
    assert Quota.objects.get(pk=dept.pk).guaranteed_cu == Decimal(8)
    assert staff_client.delete(f"{URL}{dept.pk}/").status_code == 409


def test_a_submission_over_the_ceiling_is_409_and_writes_nothing(
    api_client, fleet, a100, two_projects, staff_user
):
    user, vision, nlp = two_projects
    quota(
        staff_user,
        project=vision,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=2,
        borrowing_limit_cu=1,
    )
    api_client.force_authenticate(user)
    body = {
        "project": "vision",
        "name": "x",
        "image": "x",
        "request_kind": "whole_cards",
        "device_model": a100.slug,
        "count": 4,
    }
    response = api_client.post("/api/jobs/jobs/", body, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["message"] == (
        "The request needs 4 CU but project vision can never hold more than 3 CU (guarantee + borrowing limit)."
    )
    npu = {
        "project": "vision",
        "name": "y",
        "image": "y",
        "request_kind": "compute_units",
        "compute_units": "0.8",
        "allowed_vendors": ["huawei"],
    }
    response = api_client.post("/api/jobs/jobs/", npu, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["message"] == "Project vision has no quota for huawei cards."
    assert Job.objects.count() == 0
    # Over the guarantee but within the ceiling: accepted as pending.
    body["count"] = 3
    assert api_client.post("/api/jobs/jobs/", body, format="json").status_code == 201


def test_the_resource_quota_is_rendered_in_vendor_resource_names_and_pushed(
    fleet, a100, ascend, two_projects, staff_user
):
    user, vision, nlp = two_projects
    quota(
        staff_user,
        project=vision,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=4,
        borrowing_limit_cu=2,
    )
    quota(
        staff_user,
        project=vision,
        resource_class="vendor",
        vendor="huawei",
        guaranteed_cu="3.2",
        borrowing_limit_cu="0.8",
    )
    manifest = resource_quota_render(vision)
    # 6 CU of A100 at 1.0 = 6 cards; 4 CU of Ascend 910B3 at 0.8 = 5 NPUs (seed 004 §5 names).
    assert manifest["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "6",
        "requests.huawei.com/Ascend910": "5",
    }
    assert manifest["metadata"]["namespace"] == "vision"
    assert kubernetes_validate.validate(manifest, "1.30.0", strict=True) == "1.30"
    pushed = PushAction.objects.filter(kind="ResourceQuota", namespace="vision")
    assert pushed.count() == 2  # one per quota write; the newer supersedes the older
    assert pushed.order_by("-id").first().object == manifest
    assert pushed.filter(state="pending").count() == 1
    # Without any ceiling left, the object is deleted from the namespace.
    from apps.quotas.services import quota_delete

    for row in Quota.objects.filter(project=vision):
        quota_delete(quota=row, actor=staff_user)
    last = pushed.order_by("-id").first()
    assert (last.verb, last.state) == ("delete", "pending")


def test_showback_and_history_endpoints(api_client, fleet, a100, two_projects, staff_user):
    user, vision, nlp = two_projects
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    quota(staff_user, project=nlp, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    cards(vision, user, a100, 3)
    scheduling_cycle_run()
    api_client.force_authenticate(user)
    usage = api_client.get(f"{URL}usage/").json()
    mine = {q["quota"]["project"]: q for q in usage["quotas"]}
    assert mine["vision"]["guaranteed_used"] == "2.0000" and mine["vision"]["borrowed"] == "1.0000"
    assert mine["vision"]["share_of_guarantee"] == "100.0"
    assert {"borrower": "vision", "lender": "nlp", "amount": "1.0000"} in usage["flows"]
    from apps.jobs.models import Allocation

    Allocation.objects.update(started_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=12))
    history = api_client.get(f"{URL}history/", {"project": "vision", "days": 1}).json()
    assert history["points"][-1]["used"] == "3.0000" and history["points"][-1]["borrowed"] == "1.0000"
    assert history["points"][0]["used"] == "0.0000"
    # 2 CU of guaranteed use for 12 of 24 hours against a 2 CU guarantee: 50 %.
    assert Decimal(history["share_of_guarantee_used"]) == pytest.approx(Decimal("50.0"), abs=Decimal("0.2"))
    assert api_client.get(f"{URL}history/", {"project": "vision", "days": 0}).status_code == 400
    assert api_client.get(f"{URL}history/", {"project": "nope"}).status_code == 404


def test_the_trace_api_and_the_job_page_answer_why_pending_with_the_quota(
    client, api_client, fleet, a100, two_projects, staff_user
):
    user, vision, nlp = two_projects
    quota(
        staff_user,
        project=vision,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=1,
        borrowing_limit_cu=0,
    )
    jobs = cards(vision, user, a100, 2)
    scheduling_cycle_run()
    api_client.force_authenticate(user)
    body = api_client.get(f"/api/jobs/jobs/{jobs[1].pk}/trace/").json()
    assert body["why_pending"] == (
        "quota: project vision needs 1 CU, has 0 of its 1 CU guarantee left, borrowing limit reached "
        "(0 of 0 CU borrowed); position 1 in the queue"
    )
    client.force_login(user)
    page = client.get(f"/jobs/{jobs[1].pk}/").content.decode()
    assert "borrowing limit reached" in page


def test_the_quota_page_shows_bars_and_borrowers(client, fleet, a100, two_projects, staff_user):
    user, vision, nlp = two_projects
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    quota(staff_user, project=nlp, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    cards(vision, user, a100, 3)
    scheduling_cycle_run()
    client.force_login(user)
    response = client.get("/quotas/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="quota-bars"' in html and 'id="quota-history"' in html
    assert "<td>vision</td><td>nlp</td>" in html.replace("\n", "").replace("  ", "")


def test_without_quotas_the_page_says_everything_is_unlimited(client, fleet, two_projects):
    user, vision, nlp = two_projects
    client.force_login(user)
    assert "no quota means no limit" in client.get("/quotas/").content.decode()


def test_staff_edit_quotas_in_the_admin_through_the_service(
    client, fleet, two_projects, research, staff_user
):
    user, vision, nlp = two_projects
    client.force_login(staff_user)
    data = {
        "project": vision.pk,
        "resource_class": "any",
        "vendor": "",
        "guaranteed_cu": "2",
        "borrowing_limit_cu": "",
        "lending_limit_cu": "",
        "memory_limit_mib": "",
        "lending_windows": "[]",
        "time_zone": "Asia/Shanghai",
        "over_quota_weight": "1",
    }
    response = client.post("/admin/quotas/quota/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ChangeRecord.objects.filter(action="quota.create").count() == 1
    quota(staff_user, department=research, resource_class="any", guaranteed_cu=3)
    data.update(project=nlp.pk, guaranteed_cu="2")
    response = client.post("/admin/quotas/quota/add/", data)
    assert response.status_code == 200  # the form shows the department bound
    assert "more than the department" in response.content.decode()
    assert Quota.objects.filter(project=nlp).count() == 0


def test_the_quota_list_query_count_does_not_grow(staff_client, fleet, make_project, research, staff_user):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def count(n: int) -> int:
        for i in range(Quota.objects.count(), n):
            quota(
                staff_user,
                project=make_project(f"p{i}", department=research),
                resource_class="any",
                guaranteed_cu=1,
            )
        with CaptureQueriesContext(connection) as ctx:
            assert staff_client.get(URL).json()["count"] == n
        return len(ctx.captured_queries)

    assert count(2) == count(12)


def test_a_second_quota_for_the_same_owner_and_class_is_a_400(staff_client, fleet, two_projects, staff_user):
    user, vision, nlp = two_projects
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=1)
    response = post(
        staff_client,
        {"project": "vision", "resource_class": "vendor", "vendor": "nvidia", "guaranteed_cu": "2"},
    )
    assert response.status_code == 400
    assert details(response)["__all__"] == [
        "This owner already has a quota for this resource class; edit it."
    ]
    assert Quota.objects.filter(project=vision).count() == 1
    other = post(
        staff_client,
        {"project": "vision", "resource_class": "vendor", "vendor": "huawei", "guaranteed_cu": "2"},
    )
    assert other.status_code == 201
