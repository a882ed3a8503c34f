"""The queue order as the board reads it (issue 31): each project's first queued job
(``apps.scheduling.board.figures.queue_heads``: one LIMIT 1 per project and queued state) and one
job's queue position counted (``apps.quotas.selectors.queue_positions`` with one id) agree with the
whole queue sorted, ties in priority, fair share and submission time included."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.inventory.models import Device
from apps.jobs.models import QUEUED_STATES, Job
from apps.quotas.selectors import fair_share_order, fair_shares, queue_positions
from apps.scheduling.board.figures import queue_heads
from tests.fixtures.factories.jobs import JobFactory
from tests.fixtures.quotas import quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(fleet, research, make_project, make_job, make_allocation, staff_user):
    vision, nlp, speech = (make_project(slug, department=research) for slug in ("vision", "nlp", "speech"))
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    quota(staff_user, project=nlp, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    now = timezone.now()
    # vision has used cards (a fair-share factor above 0); nlp and speech tie at 0.
    make_allocation(make_job(vision), Device.objects.order_by("pk").first(), now - dt.timedelta(hours=3), now)
    same = now - dt.timedelta(hours=1)
    plan = [  # (project, state, priority, created_at): ties in priority and in time, across states
        (vision, "pending", 100, same),
        (vision, "admitted", 100, same),
        (vision, "pending", 500, same + dt.timedelta(minutes=5)),
        (nlp, "admitted", 100, same),
        (nlp, "pending", 100, same),
        (nlp, "pending", 100, same - dt.timedelta(minutes=1)),
        (speech, "pending", 100, same),
        (speech, "admitted", 500, same + dt.timedelta(minutes=9)),
        (speech, "running", 900, same - dt.timedelta(hours=2)),  # not queued: neither head nor counted
    ]
    jobs = []
    for project, state, priority, created in plan:
        job = JobFactory(project=project, name="q", image="x:1", state=state, priority=priority)
        Job.objects.filter(pk=job.pk).update(created_at=created)
        jobs.append(job)
    return {"projects": (vision, nlp, speech), "jobs": jobs, "now": now}


def test_each_projects_head_is_its_first_queued_job_in_queue_order(queue):
    vision, nlp, speech = queue["projects"]
    queued = Job.objects.filter(state__in=QUEUED_STATES)
    expected = {}
    for job in sorted(queued, key=lambda j: (-j.priority, j.created_at, j.pk)):
        expected.setdefault(job.project_id, job.pk)
    assert len(expected) == 3
    assert queue_heads([vision.pk, nlp.pk, speech.pk]) == expected
    assert queue_heads([nlp.pk]) == {nlp.pk: expected[nlp.pk]}
    Job.objects.filter(project=speech, state__in=QUEUED_STATES).update(state="cancelled")
    assert speech.pk not in queue_heads([vision.pk, nlp.pk, speech.pk])


def test_one_jobs_counted_position_is_its_place_in_the_sorted_queue(queue):
    vision, nlp, _speech = queue["projects"]
    shares = fair_shares([p.pk for p in queue["projects"]])
    assert shares[vision.pk] > 0 and shares[nlp.pk] == 0  # the order depends on the factor
    queued = list(Job.objects.filter(state__in=QUEUED_STATES))
    order = [j.pk for j in fair_share_order(queued)]
    ranked = queue_positions(order)  # several ids: the window
    assert ranked == {pk: i for i, pk in enumerate(order, start=1)}
    for pk in order:
        assert queue_positions([pk]) == {pk: ranked[pk]}
    among = Job.objects.filter(project=nlp)
    nlp_ranked = queue_positions([j.pk for j in queued], among=among)
    assert sorted(nlp_ranked.values()) == [1, 2, 3]
    for job in queued:
        assert queue_positions([job.pk], among=among) == (
            {job.pk: nlp_ranked[job.pk]} if job.project == nlp else {}
        )
    running = queue["jobs"][-1]
    assert queue_positions([running.pk]) == {}
    assert queue_positions([order[0]], among=Job.objects.none()) == {}


def test_the_boards_heads_and_staff_ranks_with_and_without_a_department_filter(
    queue, make_project, staff_user
):
    """The board takes each row's first queued job from ``queue_heads``; staff's ranks count every
    project with waiting jobs, those a department filter hides included."""
    from apps.accounts.models import Department
    from apps.scheduling.board import queue_board

    vision, nlp, speech = queue["projects"]
    ops = make_project("ops", department=Department.objects.create(name="Ops", slug="ops"))
    JobFactory(project=ops, name="q", image="x:1", state="pending", priority=100)
    make_project("idle", department=vision.department)  # no jobs: no head, not ranked
    full = queue_board(user=staff_user)
    research = queue_board(user=staff_user, department="research")
    assert {r.project.slug for r in research.rows} == {"vision", "nlp", "speech", "idle"}
    heads = queue_heads([vision.pk, nlp.pk, speech.pk, ops.pk])
    assert {r.project.pk: r.first_queued.pk for r in full.rows if r.first_queued} == heads
    assert full.row("idle").first_queued is None
    for row in research.rows:
        assert research.lower_factor_count(row) == full.lower_factor_count(full.row(row.project.slug))
        assert row.first_queued == full.row(row.project.slug).first_queued
    assert full.lower_factor_count(full.row("vision")) == (3, 4)  # nlp, speech, ops at 0; of 4 waiting


def test_counted_positions_of_any_page_match_the_sorted_queue(
    fleet, research, make_project, make_job, make_allocation, staff_user
):
    """``queue_positions`` counts (higher priority; same priority and a lower share; same share and
    older) instead of ranking the queue: on a queue with three priorities, projects of distinct and of
    equal shares, a project without a quota and ties in submission time, every page of ids (and every
    reader's ``among``) gets the places of the whole queue sorted by ``fair_share_order``."""
    import random

    rng = random.Random(31)
    projects = [make_project(f"p{i}", department=research) for i in range(5)]
    for project in projects[:4]:
        quota(staff_user, project=project, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    now = timezone.now()
    devices = list(Device.objects.order_by("pk")[:3])
    # p0 and p1 have used the same card-hours (equal shares above 0), p2 more; p3, p4 none (0).
    for project, device, hours in (
        (projects[0], devices[0], 2),
        (projects[1], devices[1], 2),
        (projects[2], devices[2], 5),
    ):
        make_allocation(
            make_job(project), device, now - dt.timedelta(hours=hours), now - dt.timedelta(hours=1)
        )
    base = now - dt.timedelta(hours=3)
    for i in range(60):
        job = JobFactory(
            project=rng.choice(projects),
            name=f"q{i}",
            image="x:1",
            state=rng.choice(["pending", "pending", "admitted", "running", "cancelled"]),
            priority=rng.choice([100, 500, 800]),
        )
        Job.objects.filter(pk=job.pk).update(created_at=base + dt.timedelta(minutes=rng.randrange(8)))
    shares = fair_shares([p.pk for p in projects])
    assert shares[projects[0].pk] == shares[projects[1].pk] > 0 and shares[projects[3].pk] == 0
    assert shares[projects[2].pk] > shares[projects[0].pk]
    queued = list(Job.objects.filter(state__in=QUEUED_STATES))
    order = [j.pk for j in fair_share_order(queued)]
    expected = {pk: i for i, pk in enumerate(order, start=1)}
    everyone = [j.pk for j in Job.objects.order_by("pk")]  # running and cancelled ones get no place
    assert queue_positions(everyone) == expected
    for _ in range(10):
        page = rng.sample(everyone, 12)
        assert queue_positions(page) == {pk: expected[pk] for pk in page if pk in expected}
    among = Job.objects.filter(project__in=projects[1:3])
    seen = [pk for pk in order if Job.objects.get(pk=pk).project_id in {projects[1].pk, projects[2].pk}]
    assert queue_positions(everyone, among=among) == {pk: i for i, pk in enumerate(seen, start=1)}
    # shares given (the board's) are taken when they name every waiting project, else all are read now
    assert queue_positions(everyone, shares={projects[0].pk: shares[projects[0].pk]}) == expected
    flipped = {**shares, projects[3].pk: 1e9}  # p3's jobs go last within each priority
    tail = [pk for pk in everyone if pk in expected]
    by_hand = sorted(
        (Job.objects.get(pk=pk) for pk in tail),
        key=lambda j: (-j.priority, flipped[j.project_id], j.created_at, j.pk),
    )
    assert queue_positions(everyone, shares=flipped) == {j.pk: i for i, j in enumerate(by_hand, start=1)}
