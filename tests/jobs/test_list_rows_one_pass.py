"""The job list renders its rows (live sections) in one pass: the same HTML and versions as rendering
each row on its own with render_to_string, on the page and in the live endpoint."""

from __future__ import annotations

import re

import pytest
from django.template.loader import render_to_string

from apps.core import live as live_sections
from apps.scheduling.lifecycle import job_cancel, job_submit
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.accounts import set_role

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

ROW = re.compile(r'<tr data-live-section="job-(\d+)-row" data-live-version="([0-9a-f]+)">(.*?)</tr>', re.S)


def _jobs(project, user, a100, half_a100):
    jobs = []
    for i in range(9):
        fields = {"name": f"<run {i}> & co", "image": "pytorch:2.3"}
        if i % 3 == 0:
            fields.update(request_kind="template", template=half_a100)
        elif i % 3 == 1:
            fields.update(request_kind="whole_cards", device_model=a100, count=1 + i % 2)
        else:
            fields.update(request_kind="whole_cards", device_model=a100, count=2, priority_class="low")
        jobs.append(job_submit(project=project, actor=user, **fields))
    scheduling_cycle_run()
    job_cancel(job=jobs[4], actor=user)
    return jobs


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_rows_rendered_in_one_pass_equal_rows_rendered_one_by_one(
    client, fleet, member_project, a100, half_a100, role
):
    user, project = member_project
    _jobs(project, user, a100, half_a100)
    set_role(user, project, role)
    client.force_login(user)
    response = client.get("/jobs/")
    assert response.status_code == 200
    page = response.content.decode()
    rows = {int(pk): (version, html) for pk, version, html in ROW.findall(page)}
    shown = response.context["jobs"]
    assert len(rows) == len(shown) == 9
    states = {job.state for job in shown}
    assert len(states) >= 2  # placed, waiting (and cancelled) rows
    for job in shown:
        alone = render_to_string("jobs/_job_row.html", {"job": job}, request=response.wsgi_request)
        assert rows[job.pk] == (live_sections.section_version(alone), alone)
        assert "&lt;run" in alone and "<run" not in alone  # autoescaped as before
    assert any('type="checkbox"' in html for _v, html in rows.values()) == (role == "member")


def test_live_endpoint_answers_the_same_rows_as_the_page(client, fleet, member_project, a100, half_a100):
    user, project = member_project
    jobs = _jobs(project, user, a100, half_a100)
    client.force_login(user)
    page = client.get("/jobs/").content.decode()
    rows = {int(pk): (version, html) for pk, version, html in ROW.findall(page)}
    names = ",".join(f"job-{job.pk}-row" for job in jobs)
    answer = client.get("/jobs/live/", {"ids": ",".join(str(j.pk) for j in jobs), "sections": names}).json()
    got = {int(k.split("-")[1]): (v["version"], v["html"]) for k, v in answer["sections"].items()}
    assert got == rows and len(got) == 9
