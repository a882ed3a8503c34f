"""Live pages (issue 21): the JSON the job page, the job list, the fleet and a gray batch poll
(``static/js/live.js``), scoped like the pages themselves."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.inventory.models import Node
from apps.jobs.models import JobState
from apps.rollout import services
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def _submit(project, user, a100, name="train"):
    return submit_whole_cards(project, user, a100, name=name, image="pytorch:2.3")


def test_job_states_answer_only_the_jobs_the_user_can_see(
    client, fleet, member_project, a100, make_user, make_project
):
    user, project = member_project
    mine = _submit(project, user, a100, "mine")
    other_user = make_user("bob")
    theirs = _submit(make_project("nlp", members=[other_user]), other_user, a100, "theirs")
    client.force_login(user)
    url = reverse("jobs:live")
    data = client.get(url, {"ids": f"{mine.pk},{theirs.pk}"}).json()
    assert set(data["fields"]) == {f"job-{mine.pk}-state"}  # the other project's job is not confirmed
    assert data["fields"][f"job-{mine.pk}-state"] == {"text": "pending", "tone": "info", "value": "pending"}
    scheduling_cycle_run()
    state = client.get(url, {"ids": str(mine.pk)}).json()["fields"][f"job-{mine.pk}-state"]
    assert state["value"] in (JobState.SCHEDULED, JobState.RUNNING) and state["value"] != "pending"
    response = client.get(url, {"ids": "1,abc"})
    assert response.status_code == 400 and "ids" in response.json()["message"]
    assert "no-cache" in client.get(url, {"ids": "1"})["Cache-Control"]


def test_pages_carry_the_live_hooks(client, fleet, member_project, a100):
    user, project = member_project
    job = _submit(project, user, a100)
    client.force_login(user)
    detail = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert f'data-live-ids="{job.pk}"' in detail and f'data-live-key="job-{job.pk}-state"' in detail
    listing = client.get(reverse("jobs:list")).content.decode()
    assert f'data-live-key="job-{job.pk}-state"' in listing and 'src="/static/js/live.js"' in listing


def test_fleet_counts_follow_the_node_states(client, fleet, staff_user):
    client.force_login(staff_user)
    url = reverse("inventory:fleet-live")
    before = client.get(url).json()["fields"]
    assert 'data-live-key="fleet-cards"' in client.get(reverse("inventory:fleet")).content.decode()
    node = Node.objects.filter(status=Node.Status.READY).first()
    from apps.inventory.services.ledger import node_status_set

    node_status_set(node=node, status=Node.Status.MAINTENANCE, reason="test", actor=staff_user)
    after = client.get(url).json()["fields"]
    assert after["fleet-nodes-maintenance"]["value"] == before["fleet-nodes-maintenance"]["value"] + 1
    assert after["fleet-nodes-ready"]["value"] == before["fleet-nodes-ready"]["value"] - 1
    assert after["fleet-cards"] == before["fleet-cards"]


def test_a_batch_stage_is_live_for_staff_only(client, fleet, criteria, now, staff_user, member_project):
    batch = services.batch_create(
        actor="ops",
        name="fw canary",
        slug="fw-canary",
        kind="firmware",
        target_version="9",
        criteria=criteria,
        nodes=[fleet["gpu-02"]],
    )
    url = reverse("rollout:batch-live", args=[batch.pk])
    client.force_login(staff_user)
    key = f"batch-{batch.pk}-stage"
    assert client.get(url).json()["fields"][key]["value"] == "planned"
    assert (
        f'data-live-key="{key}"'
        in client.get(reverse("rollout:batch-detail", args=[batch.pk])).content.decode()
    )
    services.batch_soak_start(batch=batch, actor="ops", now=now)
    field = client.get(url).json()["fields"][key]
    assert (field["value"], field["tone"]) == ("soaking", "info")
    client.force_login(member_project[0])
    assert client.get(url).status_code == 403
