"""Why pending with an ETA and a queue position among what the member can see (issue 21)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job, JobState
from apps.scheduling import eta, lifecycle
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def _submit(project, user, a100, name, count=1, **fields):
    return submit_whole_cards(project, user, a100, count, name=name, image="pytorch:2.3", **fields)


def _run(job):
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED, job.state_reason
    assert lifecycle.job_to_running(job=job, actor="reconciler")
    job.refresh_from_db()
    return job


@pytest.fixture
def busy(fleet, member_project, a100, make_user, make_project):
    """All 8 A100 busy: alice's 4-card job ends in 14 min, bob's (another project) in 60 min."""
    alice, vision = member_project
    bob = make_user("bob")
    nlp = make_project("nlp", members=[bob])
    mine = _submit(vision, alice, a100, "mine", count=4, expected_duration_s=14 * 60)
    theirs = _submit(nlp, bob, a100, "theirs", count=4, expected_duration_s=60 * 60)
    scheduling_cycle_run()
    return {
        "alice": alice,
        "vision": vision,
        "bob": bob,
        "nlp": nlp,
        "mine": _run(mine),
        "theirs": _run(theirs),
    }


def test_the_eta_names_the_first_job_whose_cards_cover_the_request(busy, a100, client):
    waiting = _submit(busy["vision"], busy["alice"], a100, "waiting", count=1)
    scheduling_cycle_run()
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING
    answer = eta.pending_eta(waiting, busy["alice"])
    assert answer["text"] == "after job mine finishes (~14 min)"
    assert answer["job_id"] == busy["mine"].pk

    client.force_login(busy["alice"])
    html = client.get(reverse("jobs:detail", args=[waiting.pk])).content.decode()
    assert 'id="why-eta"' in html and "after job mine finishes (~14 min)" in html


def test_another_projects_job_is_not_named(busy, a100):
    big = _submit(busy["vision"], busy["alice"], a100, "big", count=2, replicas=3)  # 6 cards: both jobs end
    answer = eta.pending_eta(big, busy["alice"])
    assert answer["text"] == "after a job of another project finishes (~60 min)"
    assert answer["job_id"] is None and answer["job_name"] is None
    # Bob sees his own job named, and the ETA of a job that needs only 4 cards is alice's, unnamed for him.
    bobs = _submit(busy["nlp"], busy["bob"], a100, "bobs", count=4)
    assert eta.pending_eta(bobs, busy["bob"])["text"] == "after a job of another project finishes (~14 min)"


def test_no_guess_without_expected_durations_or_usable_cards(busy, a100, ascend):
    Job.objects.filter(pk=busy["mine"].pk).update(expected_duration_s=None)
    waiting = _submit(busy["vision"], busy["alice"], a100, "waiting", count=1)
    assert eta.pending_eta(waiting, busy["alice"])["text"].startswith("after a job of another project")
    npu = _submit(busy["vision"], busy["alice"], ascend, "npu", count=2)  # nobody holds Ascend cards
    assert eta.pending_eta(npu, busy["alice"]) is None
    Job.objects.filter(pk=busy["theirs"].pk).update(started_at=timezone.now() - timedelta(hours=2))
    assert eta.pending_eta(waiting, busy["alice"])["minutes"] == 1  # overdue: any minute now
    assert eta.pending_eta(waiting, busy["alice"])["overdue"] is True


def test_the_queue_position_counts_only_the_jobs_the_member_can_see(busy, a100, client):
    for i in range(3):
        _submit(busy["nlp"], busy["bob"], a100, f"bob-{i}")  # older, hidden from alice
    waiting = _submit(busy["vision"], busy["alice"], a100, "waiting")
    assert eta.visible_queue_positions(busy["alice"], [waiting]) == {waiting.pk: 1}
    assert eta.visible_queue_positions(busy["bob"], [waiting]) == {}  # not bob's to see, nor counted
    client.force_login(busy["alice"])
    html = client.get(reverse("jobs:detail", args=[waiting.pk])).content.decode()
    assert "<strong>#1</strong>" in html
    listing = client.get(reverse("jobs:list")).content.decode()
    assert ">#1</span>" in listing and ">#4</span>" not in listing


def test_the_api_trace_gives_the_visible_position_and_the_eta(busy, a100, client):
    for i in range(2):
        _submit(busy["nlp"], busy["bob"], a100, f"bob-{i}")  # older, hidden from alice
    waiting = _submit(busy["vision"], busy["alice"], a100, "waiting")
    client.force_login(busy["alice"])
    body = client.get(f"/api/jobs/jobs/{waiting.pk}/trace/").json()
    assert body["queue_position"] == 1 and body["eta_minutes"] == 14
    assert "position 1 in the queue" in body["why_pending"]
    assert "after job mine finishes (~14 min)" in body["why_pending"]
