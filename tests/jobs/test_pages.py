"""The job pages: list, submit (with its live preview), detail with "why" and cancel."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core.filters import PageFilterForm
from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.lifecycle import job_submit
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.accounts import set_role

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]


def submit(project, user, **fields):
    fields.setdefault("name", "job")
    fields.setdefault("image", "pytorch:2.3")
    return job_submit(project=project, actor=user, **fields)


def form_data(project, **overrides):
    data = {
        "project": project.pk,
        "name": "resnet-run",
        "kind": "training",
        "image": "pytorch:2.3-cuda12.4",
        "command": 'torchrun --nproc-per-node 4 train.py --name "run 1"',
        "env": "NCCL_DEBUG=INFO\n# comment\nEPOCHS=10",
        "runtime_requirement": "",
        "request_kind": "whole_cards",
        "count": 1,
        "replicas": 1,
        "priority_class": "normal",
        "max_retries": 0,
        "checkpoint_dir": "/mnt/ckpt/run-1",
        "expected_duration_h": "1.5",
    }
    data.update(overrides)
    return data


@pytest.fixture
def member(client, member_project):
    user, project = member_project
    client.force_login(user)
    return user, project


# ------------------------------------------------------------------ access


@pytest.mark.parametrize("url", ["/jobs/", "/jobs/submit/", "/jobs/1/"])
def test_anonymous_users_are_sent_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_anonymous_preview_is_refused(client):
    response = client.post("/jobs/submit/preview/", {})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_member_and_staff_see_the_list_and_the_detail(client, fleet, member_project, staff_user, a100):
    user, project = member_project
    job = submit(project, user, name="bert-base", request_kind="whole_cards", device_model=a100, count=2)
    for viewer in (user, staff_user):
        client.force_login(viewer)
        listing = client.get("/jobs/")
        assert listing.status_code == 200
        body = listing.content.decode()
        assert "bert-base" in body
        assert "2 whole card(s) of A100 80GB SXM4" in body
        assert 'data-value="pending"' in body
        assert "#1" in body  # queue position
        detail = client.get(f"/jobs/{job.pk}/")
        assert detail.status_code == 200
        assert "pytorch:2.3" in detail.content.decode()


def test_list_times_are_in_the_platform_time_zone(client, fleet, member, a100, settings):
    user, project = member
    job = submit(project, user, request_kind="whole_cards", device_model=a100)
    from zoneinfo import ZoneInfo

    local = job.created_at.astimezone(ZoneInfo(settings.TIME_ZONE)).strftime("%Y-%m-%d %H:%M")
    assert local in client.get("/jobs/").content.decode()


def test_an_outsider_sees_nothing_and_gets_404(client, fleet, member_project, make_user, make_project, a100):
    user, project = member_project
    job = submit(project, user, name="secret-run", request_kind="whole_cards", device_model=a100)
    outsider = make_user("mallory")
    make_project("other", members=[outsider])
    client.force_login(outsider)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    listing = client.get("/jobs/")
    assert listing.status_code == 200 and "secret-run" not in listing.content.decode()
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_list_filters_and_search_are_kept_in_the_form(client, fleet, member, a100, make_project):
    user, project = member
    submit(project, user, name="alpha", request_kind="whole_cards", device_model=a100, kind="training")
    submit(project, user, name="beta", request_kind="whole_cards", device_model=a100, kind="inference")
    response = client.get("/jobs/", {"kind": "inference", "search": "bet", "project": project.pk})
    body = response.content.decode()
    assert "beta" in body and "alpha" not in body
    assert 'value="bet"' in body
    assert '<option value="inference" selected>' in body
    empty = client.get("/jobs/", {"state": "running"}).content.decode()
    assert "No job matches these filters." in empty


def test_list_filter_refuses_an_invisible_project_and_keeps_the_others(
    client, fleet, member, a100, make_project, make_user
):
    """The job list filters with JobPageFilterSet: another project's id is a field error (its jobs
    never show), and the other valid filters still apply."""
    user, project = member
    submit(project, user, name="alpha", request_kind="whole_cards", device_model=a100, kind="training")
    submit(project, user, name="beta", request_kind="whole_cards", device_model=a100, kind="inference")
    stranger = make_user("mallory")
    other = make_project("other", members=[stranger])
    submit(other, stranger, name="secret-run", request_kind="whole_cards", device_model=a100)
    response = client.get("/jobs/", {"project": other.pk, "kind": "inference"})
    assert isinstance(response.context["form"], PageFilterForm)
    assert response.context["form"]["project"].errors
    body = response.content.decode()
    assert "secret-run" not in body and "beta" in body and "alpha" not in body


def test_empty_list_says_how_to_submit(client, member):
    body = client.get("/jobs/").content.decode()
    assert "No jobs yet" in body and 'href="/jobs/submit/"' in body


def test_list_query_count_does_not_grow_with_rows(client, fleet, member, a100, half_a100):
    user, project = member

    def make(n):
        for i in range(n):
            if i % 2:
                submit(project, user, name=f"j{i}", request_kind="whole_cards", device_model=a100)
            else:
                submit(project, user, name=f"t{i}", request_kind="template", template=half_a100)

    make(5)
    with CaptureQueriesContext(connection) as small:
        assert client.get("/jobs/").status_code == 200
    make(20)
    with CaptureQueriesContext(connection) as large:
        response = client.get("/jobs/")
    assert response.status_code == 200 and response.content.decode().count("/jobs/") >= 25
    assert len(large.captured_queries) == len(small.captured_queries)


# ------------------------------------------------------------------ submit


def test_a_viewer_cannot_submit(client, fleet, member_project, a100):
    user, project = member_project
    set_role(user, project, "viewer")
    client.force_login(user)
    page = client.get("/jobs/submit/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "You cannot submit jobs" in body and "viewer" in body
    assert 'name="image"' not in body
    response = client.post("/jobs/submit/", form_data(project, device_model=a100.pk))
    assert response.status_code == 403
    assert not Job.objects.exists()
    preview = client.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk))
    assert preview.status_code == 403


def test_a_valid_submit_creates_a_pending_job_and_redirects(client, fleet, member, a100):
    user, project = member
    response = client.post("/jobs/submit/", form_data(project, device_model=a100.pk, count=2))
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.state == JobState.PENDING and job.project == project and job.submitted_by == user
    assert job.command == ["torchrun", "--nproc-per-node", "4", "train.py", "--name", "run 1"]
    assert job.env == {"NCCL_DEBUG": "INFO", "EPOCHS": "10"}
    assert job.expected_duration_s == 5400 and job.checkpoint_dir == "/mnt/ckpt/run-1"
    assert job.device_model == a100 and job.count == 2 and job.template is None
    detail = client.get(response["Location"])
    assert "resnet-run submitted" in detail.content.decode()


def test_submit_with_compute_units_keeps_only_that_kinds_fields(client, fleet, member, a100, half_a100):
    user, project = member
    data = form_data(
        project,
        request_kind="compute_units",
        compute_units="0.5",
        memory_gib="20",
        allowed_vendors=["nvidia"],
        template=half_a100.pk,  # left over from another kind: ignored
    )
    response = client.post("/jobs/submit/", data)
    assert response.status_code == 302, response.content.decode()
    job = Job.objects.get()
    assert job.request_kind == "compute_units" and job.template is None
    assert job.memory_mib == 20 * 1024 and job.allowed_vendors == ["nvidia"]
    assert str(job.requested_cu) == "0.5000"


def test_a_missing_template_is_shown_and_nothing_is_created(client, fleet, member):
    user, project = member
    response = client.post("/jobs/submit/", form_data(project, request_kind="template"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "Choose a compute template." in body
    assert 'value="resnet-run"' in body and "NCCL_DEBUG=INFO" in body  # the input is kept
    assert not Job.objects.exists()


def test_missing_compute_units_and_a_bad_command_are_field_errors(client, fleet, member):
    user, project = member
    data = form_data(project, request_kind="compute_units", command='python "unclosed', env="1BAD=x")
    body = client.post("/jobs/submit/", data).content.decode()
    assert "Give a positive number of compute units." in body
    assert "Cannot split the command" in body
    assert "Line 1: expected KEY=VALUE" in body
    assert not Job.objects.exists()


def test_submit_a_copy_prefills_the_form_from_a_visible_job(
    client, fleet, member, a100, make_user, make_project
):
    user, project = member
    job = submit(
        project,
        user,
        name="copied",
        request_kind="whole_cards",
        device_model=a100,
        count=3,
        command=["python", "train.py", "--name", "run 1"],
        env={"A": "1"},
        expected_duration_s=5400,
    )
    assert f'href="/jobs/submit/?from={job.pk}"' in client.get(f"/jobs/{job.pk}/").content.decode()
    body = client.get("/jobs/submit/", {"from": job.pk}).content.decode()
    assert 'value="copied"' in body and 'value="3"' in body and 'value="1.50"' in body
    assert "python train.py --name &#x27;run 1&#x27;" in body
    assert re.search(r'<input type="radio" name="request_kind" value="whole_cards"[^>]*checked', body)
    # Another project's job is not copied: the form stays empty.
    outsider = make_user("eve")
    make_project("eves", members=[outsider])
    client.force_login(outsider)
    response = client.get("/jobs/submit/", {"from": job.pk})
    assert response.status_code == 200 and 'name="image"' in response.content.decode()
    assert "copied" not in response.content.decode()


def test_an_impossible_request_is_refused_with_the_reason(client, fleet, member, a100):
    user, project = member
    response = client.post("/jobs/submit/", form_data(project, device_model=a100.pk, count=16))
    assert response.status_code == 200
    body = response.content.decode()
    assert "No device in the fleet could ever satisfy this request" in body
    assert 'value="16"' in body and 'value="resnet-run"' in body
    assert not Job.objects.exists()


def test_an_unreadable_runtime_requirement_is_a_field_error(client, fleet, member, a100):
    user, project = member
    body = client.post(
        "/jobs/submit/", form_data(project, device_model=a100.pk, runtime_requirement="cuda twelve")
    ).content.decode()
    assert "cannot read the runtime requirement" in body
    assert not Job.objects.exists()


def test_only_projects_where_the_user_may_submit_are_offered(client, fleet, member, make_project, a100):
    user, project = member
    watched = make_project("watched", members=[user], role="viewer")
    body = client.get("/jobs/submit/").content.decode()
    assert f'<option value="{project.pk}"' in body and f'<option value="{watched.pk}"' not in body
    response = client.post("/jobs/submit/", form_data(watched, device_model=a100.pk))
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Job.objects.exists()


# ------------------------------------------------------------------ live preview


def test_preview_names_the_nodes_that_could_take_the_request_now(client, fleet, member, a100):
    user, project = member
    response = client.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk, count=4))
    assert response.status_code == 200
    data = response.json()
    assert data["valid"] is True and data["errors"] == {}
    assert data["request"] == "4 whole card(s) of A100 80GB SXM4"
    assert data["compute_units_per_hour"] == "4"
    assert data["feasible"]["ok"] is True
    assert data["placed_now"] is True
    [alternative] = data["alternatives"]
    assert alternative["placed"] and alternative["chosen"]
    [part] = alternative["nodes"]
    assert part["node"] in {"gpu-01", "gpu-02"}
    assert len(part["cards"]) == 4 and all(c["whole"] for c in part["cards"])
    assert {c["node"] for c in alternative["candidates"]} <= {"gpu-01", "gpu-02"}
    assert not Job.objects.exists()  # nothing saved


def test_preview_explains_a_request_that_cannot_fit_now(client, fleet, member, a100):
    user, project = member
    for i in range(2):
        submit(project, user, name=f"fill{i}", request_kind="whole_cards", device_model=a100, count=4)
    assert scheduling_cycle_run().placed == 2
    data = client.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk, count=4)).json()
    assert data["feasible"]["ok"] is True  # it could fit an empty fleet ...
    assert data["placed_now"] is False  # ... but not now
    [alternative] = data["alternatives"]
    assert not alternative["placed"]
    assert "0/3 nodes are available" in alternative["explanation"]
    assert {r["node"] for r in alternative["rejections"]} == {"gpu-01", "gpu-02", "npu-01"}


def test_the_preview_and_the_job_page_show_the_same_scores_in_the_same_words(client, fleet, member, a100):
    """Issue 29 §9: the preview scored with another policy ("score 58") than the cycle, whose raw key
    the job page printed ("135.55985, -7000, 0")."""
    user, project = member
    data = client.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk, count=1)).json()
    preview = {c["node"]: c["score_text"] for c in data["alternatives"][0]["candidates"]}
    assert preview and all(
        " · " in text or text.lstrip("-").replace(".", "").isdigit() for text in preview.values()
    )
    job = job_submit(
        project=project, actor=user, name="t", image="x", request_kind="whole_cards", device_model=a100
    )
    scheduling_cycle_run()
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    for node, text in preview.items():
        assert f'<td class="mono">{node}</td><td class="mono">{text}</td>' in page, (node, text)
    assert not re.search(r"\d\.\d{3,}", "".join(preview.values()))  # two places at most


def test_preview_does_not_name_nodes_the_user_cannot_see(client, fleet, member, a100, make_project):
    from apps.inventory.models import Device, Node, Pool

    user, project = member
    owner = make_project("owner")
    cluster = fleet["gpu-01"].cluster
    pool = Pool.objects.create(cluster=cluster, name="reserved", slug="reserved", owner_project=owner)
    node = Node.objects.create(cluster=cluster, pool=pool, name="secret-01", driver_version="550.54.15")
    for i in range(8):
        Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"s-{i}", device_model=a100)
    response = client.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk, count=8))
    data = response.json()
    assert data["placed_now"] is False
    assert "secret-01" not in response.content.decode()
    # Issue 29 §9: the counts are of the nodes the member sees (3), not of the fleet (4).
    explanation = data["alternatives"][0]["explanation"]
    assert "0/3 nodes are available" in explanation and "reserved for another project" not in explanation


def test_a_pending_job_explains_itself_with_the_nodes_its_reader_sees(
    client, api_client, fleet, member, a100, make_project, staff_user
):
    """Issue 29 §9: "0/4 nodes … 1 pool reserved for another project" beside a node list of 3."""
    from apps.inventory.models import Device, Node, Pool

    user, project = member
    owner = make_project("owner")
    pool = Pool.objects.create(
        cluster=fleet["gpu-01"].cluster, name="reserved", slug="reserved", owner_project=owner
    )
    node = Node.objects.create(cluster=pool.cluster, pool=pool, name="secret-01", driver_version="550.54.15")
    for i in range(4):
        Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"s-{i}", device_model=a100)
    # 4 × A100 fit gpu-01 or gpu-02 once free; both are taken, so the job waits.
    for _ in range(2):
        job_submit(
            project=project,
            actor=user,
            name="hog",
            image="x",
            request_kind="whole_cards",
            device_model=a100,
            count=4,
        )
    scheduling_cycle_run()
    waiting = job_submit(
        project=project,
        actor=user,
        name="waiting",
        image="x",
        request_kind="whole_cards",
        device_model=a100,
        count=4,
    )
    scheduling_cycle_run()
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING and "1 pool reserved for another project" in waiting.state_reason
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "0/3 nodes are available" in page and "reserved for another project" not in page
    api_client.force_authenticate(user)
    answer = api_client.get(f"/api/jobs/jobs/{waiting.pk}/trace/").json()
    assert (
        "0/3 nodes are available" in answer["explanation"]
        and "0/3 nodes are available" in answer["why_pending"]
    )
    assert "reserved for another project" not in answer["explanation"] + answer["why_pending"]
    client.force_login(staff_user)  # staff see every node, the reserved pool included
    assert "1 pool reserved for another project" in client.get(f"/jobs/{waiting.pk}/").content.decode()


def test_preview_respects_the_runtime_requirement(client, fleet, member, a100):
    user, project = member
    data = client.post(
        "/jobs/submit/preview/",
        form_data(project, device_model=a100.pk, count=4, runtime_requirement="cuda 12.4"),
    ).json()
    assert data["placed_now"] is True
    assert [p["node"] for p in data["alternatives"][0]["nodes"]] == ["gpu-01"]


def test_preview_reports_errors_and_impossible_requests(client, fleet, member, a100):
    user, project = member
    missing = client.post(
        "/jobs/submit/preview/", form_data(project, request_kind="template", name="")
    ).json()
    assert missing["valid"] is False and "template" in missing["errors"] and "name" in missing["errors"]
    assert missing["alternatives"] == []
    impossible = client.post(
        "/jobs/submit/preview/", form_data(project, device_model=a100.pk, count=16)
    ).json()
    assert impossible["valid"] is False and impossible["feasible"]["ok"] is False
    assert impossible["placed_now"] is False
    assert "could ever satisfy" in impossible["errors"]["__all__"][0]


def test_preview_of_compute_units_lists_the_shapes(client, fleet, member):
    user, project = member
    data = client.post(
        "/jobs/submit/preview/", form_data(project, request_kind="compute_units", compute_units="0.5")
    ).json()
    assert data["valid"] is True and data["compute_units_per_hour"] == "0.5"
    models = [a["models"] for a in data["alternatives"]]
    assert ["A100 80GB SXM4"] in models and ["Ascend 910B3"] in models
    assert sum(1 for a in data["alternatives"] if a["chosen"]) == 1


def test_preview_needs_a_csrf_token(fleet, member_project, a100):
    from django.test import Client

    user, project = member_project
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    assert strict.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk)).status_code == 403


# ------------------------------------------------------------------ detail: why, timeline, cancel


def test_detail_explains_the_placement_and_the_wait(client, fleet, member, a100):
    user, project = member
    placed = submit(project, user, name="first", request_kind="whole_cards", device_model=a100, count=4)
    submit(project, user, name="second", request_kind="whole_cards", device_model=a100, count=4)
    waiting = submit(project, user, name="third", request_kind="whole_cards", device_model=a100, count=4)
    scheduling_cycle_run()
    placed.refresh_from_db()
    assert placed.state == JobState.SCHEDULED
    node = Allocation.objects.filter(job=placed).values_list("node__name", flat=True).first()
    body = client.get(f"/jobs/{placed.pk}/").content.decode()
    assert "Why this card?" in body and node in body
    assert "placed on" in body  # the trace's result step
    assert "gpu-0" in body and "whole card" in body
    assert "Submitted" in body and "scheduled on" in body  # the timeline

    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING
    body = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "Why pending?" in body
    assert "Queue position: <strong>#1</strong>" in body
    assert "0/3 nodes are available" in body


def test_a_new_job_shows_its_queue_position_before_any_cycle(client, fleet, member, a100):
    user, project = member
    submit(project, user, name="a", request_kind="whole_cards", device_model=a100)
    second = submit(project, user, name="b", request_kind="whole_cards", device_model=a100)
    body = client.get(f"/jobs/{second.pk}/").content.decode()
    assert "Why pending?" in body and "#2" in body and "has not looked at this job yet" in body


def test_cancel_from_the_page_releases_the_allocations(client, fleet, member, a100):
    user, project = member
    job = submit(project, user, request_kind="whole_cards", device_model=a100, count=2)
    scheduling_cycle_run()
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 2
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'action="/jobs/{job.pk}/cancel/"' in page
    response = client.post(f"/jobs/{job.pk}/cancel/", {"reason": "wrong image"})
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    # Issue 17: the cards are releasing (held) until Kubernetes confirms the objects are gone.
    live = Allocation.objects.filter(job=job, released_at__isnull=True)
    assert live.count() == 2 and not live.filter(releasing_since__isnull=True).exists()
    body = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "cancelled" in body and "wrong image" in body
    assert f'action="/jobs/{job.pk}/cancel/"' not in body  # no second cancel
    again = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "it cannot be cancelled" in again.content.decode()


def test_a_viewer_sees_no_cancel_button_and_cannot_cancel(client, fleet, member_project, a100):
    user, project = member_project
    job = submit(project, user, request_kind="whole_cards", device_model=a100)
    set_role(user, project, "viewer")
    client.force_login(user)
    assert "/cancel/" not in client.get(f"/jobs/{job.pk}/").content.decode()
    response = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "Only project members and admins can cancel jobs." in response.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_cancel_needs_post(client, fleet, member, a100):
    user, project = member
    job = submit(project, user, request_kind="whole_cards", device_model=a100)
    assert client.get(f"/jobs/{job.pk}/cancel/").status_code == 405


# ------------------------------------------------------------------ language


def test_the_job_list_renders_in_chinese(client, fleet, member, a100):
    user, project = member
    submit(project, user, request_kind="whole_cards", device_model=a100)
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/jobs/"})
    assert response.status_code == 302
    body = client.get("/jobs/").content.decode()
    assert 'lang="zh-hans"' in body
    assert "作业" in body  # "Jobs"
    assert "排队位置" in body  # "Queue position"
    assert "等待中" in body  # the pending state


def test_preview_prices_the_request_and_shows_the_quota_left(client, fleet, member, a100, staff_user):
    from datetime import date
    from decimal import Decimal

    from apps.billing.services import rate_card_create
    from apps.quotas.services import quota_create

    user, project = member
    data = client.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk, count=2)).json()
    assert data["cost_per_hour"] is None and data["quota_left"] is None  # no price, no quota yet
    rate_card_create(
        actor=staff_user,
        name="A100",
        scope="device_model",
        device_model=a100,
        price_per_cu_hour=Decimal("12.50"),
        effective_from=date(2024, 1, 1),
    )
    quota_create(
        actor=staff_user,
        project=project,
        resource_class="any",
        guaranteed_cu=Decimal("3"),
        borrowing_limit_cu=Decimal("1"),
    )
    data = client.post("/jobs/submit/preview/", form_data(project, device_model=a100.pk, count=2)).json()
    assert data["cost_per_hour"] == "25.00 CNY"  # 2 CU × 12.50
    assert data["quota_left"] == "3 CU of the guarantee free; may borrow up to 1 CU"
