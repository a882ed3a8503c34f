"""Scenarios adapted from Kueue's documented cohort examples (borrowing, lendingLimit, reclaimWithinCohort,
preemption withinClusterQueue), in compute units over two vendors (A100 = 1.0 CU, Ascend 910B3 = 0.8 CU).

A department plays the cohort, a project the ClusterQueue, a quota row its nominal quota."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from apps.core.errors import Conflict
from apps.jobs.models import Allocation, Job, JobEvent, JobState
from apps.quotas.selectors import fair_share_order, queue_positions
from apps.scheduling.models import DecisionTrace
from apps.scheduling.selectors import why_pending
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.quotas import cards, quota, submit

pytestmark = pytest.mark.django_db


def confirm_releases(seconds: float = 60) -> None:
    """Let the simulated cluster run the deletes and end the grace period, then reconcile: the cards
    of preempted jobs are freed only once Kubernetes confirms their objects gone (issue 17). Like
    kube-scheduler's nominated preemptor, the job that preempted waits for that."""
    from apps.clusters.connections import backend_for
    from apps.inventory.models import Cluster
    from apps.scheduling.reconcile import reconcile_all
    from tests.kube.test_reconcile import push_everything

    push_everything()
    for cluster in Cluster.objects.all():
        backend = backend_for(cluster)
        if hasattr(backend, "advance"):
            backend.advance(seconds)
    reconcile_all()
    push_everything()
    reconcile_all()


def active(project, **filters):
    return Allocation.objects.filter(job__project=project, released_at__isnull=True, **filters)


def cu(qs) -> Decimal:
    return sum((a.compute_units for a in qs), Decimal(0))


def nvidia_cohort(staff, vision, nlp, **vision_fields):
    """vision and nlp are each guaranteed 4 of the 8 A100 CU; nothing is left for an elastic pool."""
    quota(staff, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=4, **vision_fields)
    quota(staff, project=nlp, resource_class="vendor", vendor="nvidia", guaranteed_cu=4)


def test_a_project_borrows_its_neighbours_idle_guarantee_and_marks_it_borrowed(
    fleet, a100, two_projects, staff_user
):
    """Kueue: team-a (nominal 4) runs 6 while team-b is idle: 4 within nominal, 2 borrowed."""
    user, vision, nlp = two_projects
    nvidia_cohort(staff_user, vision, nlp)
    jobs = cards(vision, user, a100, 6)
    result = scheduling_cycle_run()
    assert result.placed == 6
    assert cu(active(vision, borrowed=False)) == Decimal(4)
    borrowed = active(vision, borrowed=True)
    assert cu(borrowed) == Decimal(2)
    # The newest two are the borrowers.
    assert {a.job_id for a in borrowed} == {jobs[4].pk, jobs[5].pk}
    trace = DecisionTrace.objects.get(job=jobs[5], outcome="placed")
    assert any(s["tier"] == "quota" and "borrowed" in s["message"] for s in trace.steps)


def test_the_borrowing_limit_keeps_the_rest_pending_with_the_reason(fleet, a100, two_projects, staff_user):
    user, vision, nlp = two_projects
    nvidia_cohort(staff_user, vision, nlp, borrowing_limit_cu=1)
    jobs = cards(vision, user, a100, 6)
    result = scheduling_cycle_run()
    assert (result.placed, result.quota_pending) == (5, 1)
    last = Job.objects.get(pk=jobs[5].pk)
    assert last.state == JobState.PENDING
    assert last.state_reason == (
        "quota: project vision needs 1 CU, has 0 of its 4 CU guarantee left, "
        "borrowing limit reached (1 of 1 CU borrowed)"
    )
    trace = DecisionTrace.objects.filter(job=last).latest("created_at")
    assert trace.outcome == "pending" and trace.placement is None
    assert trace.steps[-1]["tier"] == "quota" and trace.steps[-1]["data"]["limit"] == "borrowing"
    assert cu(active(vision, borrowed=True)) == Decimal(1)
    # A request beyond even the ceiling (4 + 1 CU) is refused outright, and nothing is written.
    before = Job.objects.count()
    with pytest.raises(Conflict) as excinfo:
        submit(vision, user, name="huge", request_kind="whole_cards", device_model=a100, count=3, replicas=2)
    assert excinfo.value.message == (
        "The request needs 6 CU but project vision can never hold more than 5 CU (guarantee + borrowing limit)."
    )
    assert Job.objects.count() == before


def test_a_lending_limit_bounds_what_the_neighbour_lends(fleet, a100, two_projects, staff_user):
    """Kueue lendingLimit: team-b lends at most 1 of its idle 4."""
    user, vision, nlp = two_projects
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=4)
    quota(
        staff_user, project=nlp, resource_class="vendor", vendor="nvidia", guaranteed_cu=4, lending_limit_cu=1
    )
    jobs = cards(vision, user, a100, 6)
    scheduling_cycle_run()
    assert cu(active(vision)) == Decimal(5)
    waiting = Job.objects.get(pk=jobs[5].pk)
    assert waiting.state == JobState.PENDING
    assert "only 0 of the 1 CU it must borrow is idle and lendable" in waiting.state_reason
    answer = why_pending(waiting)
    assert answer["quota"].startswith("project vision needs 1 CU, has 0 of its 4 CU guarantee left")
    assert answer["queue_position"] == 1
    assert "position 1 in the queue" in answer["text"]


def test_an_open_lending_window_lends_all_idle_guarantee(fleet, a100, two_projects, staff_user):
    """Seed 001 §5.1: a project that works by day releases its night-time share."""
    user, vision, nlp = two_projects
    now = dt.datetime.now(ZoneInfo("Asia/Shanghai"))
    window = {
        "start": (now - dt.timedelta(hours=1)).strftime("%H:%M"),
        "end": (now + dt.timedelta(hours=1)).strftime("%H:%M"),
    }
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=4)
    quota(
        staff_user,
        project=nlp,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=4,
        lending_limit_cu=0,
        lending_windows=[window],
    )
    cards(vision, user, a100, 7)
    scheduling_cycle_run()
    assert cu(active(vision)) == Decimal(7)


def test_a_lender_reclaims_its_guarantee_from_the_newest_borrowers(fleet, a100, two_projects, staff_user):
    """Kueue reclaimWithinCohort: team-b's own jobs need its nominal back; the borrowers are preempted
    (lowest priority, then newest first) and requeued; team-b's jobs start in the same cycle."""
    user, vision, nlp = two_projects
    nvidia_cohort(staff_user, vision, nlp)
    vision_jobs = cards(vision, user, a100, 6, prefix="v")
    scheduling_cycle_run()
    borrowers = {a.job_id for a in active(vision, borrowed=True)}
    assert len(borrowers) == 2
    nlp_jobs = cards(nlp, user, a100, 4, prefix="n")
    result = scheduling_cycle_run()
    assert sorted(result.preempted) == sorted(borrowers)
    confirm_releases()
    scheduling_cycle_run()
    for job in nlp_jobs:
        assert Job.objects.get(pk=job.pk).state in (JobState.SCHEDULED, JobState.RUNNING)
    assert cu(active(nlp, borrowed=False)) == Decimal(4)
    assert cu(active(vision, borrowed=False)) == Decimal(4)  # the guaranteed four never moved
    assert not active(vision, borrowed=True).exists()
    for pk in borrowers:
        victim = Job.objects.get(pk=pk)
        assert victim.state == JobState.PENDING and victim.attempt == 1
        assert victim.events.filter(kind=JobEvent.Kind.PREEMPTED).exists()
    # Next cycle: no free card and nothing left to borrow; the answer names both, and the position.
    scheduling_cycle_run()
    victim = Job.objects.get(pk=vision_jobs[5].pk)
    assert victim.state == JobState.PENDING
    answer = why_pending(victim)
    assert "only 0 of the 1 CU it must borrow is idle and lendable" in answer["quota"]
    assert "insufficient free cards" in answer["placement"]
    assert answer["queue_position"] in (1, 2)


def test_a_higher_priority_job_preempts_a_lower_one_of_its_own_project(fleet, a100, two_projects, staff_user):
    """Kueue withinClusterQueue: LowerPriority."""
    user, vision, nlp = two_projects
    quota(
        staff_user,
        project=vision,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=2,
        borrowing_limit_cu=0,
    )
    low = cards(vision, user, a100, 2, prefix="low", priority_class="low")
    scheduling_cycle_run()
    urgent = submit(
        vision, user, name="urgent", request_kind="whole_cards", device_model=a100, priority_class="high"
    )
    result = scheduling_cycle_run()
    assert result.preempted == [low[1].pk]  # the newest of the lowest priority
    confirm_releases()
    scheduling_cycle_run()
    assert Job.objects.get(pk=urgent.pk).state in (JobState.SCHEDULED, JobState.RUNNING)
    assert Job.objects.get(pk=low[0].pk).state in (JobState.SCHEDULED, JobState.RUNNING)
    assert cu(active(vision)) == Decimal(2)


def test_quota_in_compute_units_buys_ascend_cards_at_the_coefficient_rate(
    fleet, a100, ascend, two_projects, staff_user
):
    """An "any accelerator" guarantee of 4 CU is 4 A100 or 5 Ascend 910B3 (0.8 CU each)."""
    user, vision, nlp = two_projects
    quota(staff_user, project=vision, resource_class="any", guaranteed_cu=4, borrowing_limit_cu="0.8")
    first = submit(
        vision,
        user,
        name="npu-a",
        request_kind="compute_units",
        compute_units="1.6",
        allowed_vendors=["huawei"],
    )
    second = submit(
        vision,
        user,
        name="npu-b",
        request_kind="compute_units",
        compute_units="3.2",
        allowed_vendors=["huawei"],
    )
    scheduling_cycle_run()
    assert Job.objects.get(pk=first.pk).state == JobState.SCHEDULED
    assert Job.objects.get(pk=second.pk).state == JobState.SCHEDULED
    rows = list(active(vision))
    assert len(rows) == 6 and all(a.device.vendor == "huawei" for a in rows)
    assert cu(active(vision, borrowed=False)) == Decimal("4.0")  # 5 cards within the guarantee
    assert cu(active(vision, borrowed=True)) == Decimal("0.8")  # the sixth is borrowed
    third = submit(vision, user, name="gpu", request_kind="whole_cards", device_model=a100)
    scheduling_cycle_run()
    assert "borrowing limit reached" in Job.objects.get(pk=third.pk).state_reason


def test_a_department_borrowing_limit_bounds_borrowing_from_other_departments(
    fleet, a100, make_project, make_user, research, staff_user
):
    from apps.accounts.models import Department

    user = make_user("bob")
    ops = Department.objects.create(name="Ops", slug="ops")
    vision = make_project("vision", department=research, members=[user])
    infra = make_project("infra", department=ops, members=[user])
    quota(
        staff_user,
        department=research,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=2,
        borrowing_limit_cu=1,
    )
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=2)
    quota(staff_user, project=infra, resource_class="vendor", vendor="nvidia", guaranteed_cu=6)
    jobs = cards(vision, user, a100, 4)
    scheduling_cycle_run()
    assert cu(active(vision)) == Decimal(3)
    assert (
        "department research reached its borrowing limit of 1 CU"
        in Job.objects.get(pk=jobs[3].pk).state_reason
    )


def test_projects_without_quotas_stay_unlimited_next_to_limited_ones(
    fleet, a100, two_projects, make_project, staff_user
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
    free = make_project("free", members=[user])
    cards(free, user, a100, 5, prefix="f")
    cards(vision, user, a100, 2, prefix="v")
    scheduling_cycle_run()
    assert active(free).count() == 5 and not active(free, borrowed=True).exists()
    assert active(vision).count() == 1


def test_the_queue_orders_by_priority_then_fair_share_then_age(fleet, a100, two_projects, staff_user):
    user, vision, nlp = two_projects
    nvidia_cohort(staff_user, vision, nlp)
    cards(vision, user, a100, 2, prefix="busy")
    scheduling_cycle_run()
    # vision has used 2 CU for ten hours; nlp nothing.
    Allocation.objects.update(started_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=10))
    old_vision = submit(vision, user, name="v-old", request_kind="whole_cards", device_model=a100, count=4)
    new_nlp = submit(nlp, user, name="n-new", request_kind="whole_cards", device_model=a100, count=4)
    urgent_vision = submit(
        vision,
        user,
        name="v-urgent",
        request_kind="whole_cards",
        device_model=a100,
        count=4,
        priority_class="high",
    )
    queued = list(Job.objects.filter(state="pending"))
    assert [j.pk for j in fair_share_order(queued)] == [urgent_vision.pk, new_nlp.pk, old_vision.pk]
    assert queue_positions([old_vision.pk, new_nlp.pk]) == {new_nlp.pk: 2, old_vision.pk: 3}


def test_when_a_lending_window_closes_the_borrowers_are_reclaimed(fleet, a100, two_projects, staff_user):
    """Night-time lending ends: borrowed use no pool covers any more is reclaimed, newest first."""
    from apps.quotas.services import quota_update

    user, vision, nlp = two_projects
    now = dt.datetime.now(ZoneInfo("Asia/Shanghai"))
    open_window = {
        "start": (now - dt.timedelta(hours=1)).strftime("%H:%M"),
        "end": (now + dt.timedelta(hours=1)).strftime("%H:%M"),
    }
    quota(staff_user, project=vision, resource_class="vendor", vendor="nvidia", guaranteed_cu=4)
    lender = quota(
        staff_user,
        project=nlp,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=4,
        lending_limit_cu=1,
        lending_windows=[open_window],
    )
    jobs = cards(vision, user, a100, 7)
    scheduling_cycle_run()
    assert cu(active(vision, borrowed=True)) == Decimal(3)
    closed_window = {
        "start": (now + dt.timedelta(hours=2)).strftime("%H:%M"),
        "end": (now + dt.timedelta(hours=3)).strftime("%H:%M"),
    }
    quota_update(quota=lender, actor=staff_user, lending_windows=[closed_window])
    result = scheduling_cycle_run()
    # Only 1 CU stays lendable: the two newest borrowers go back to the queue.
    assert sorted(result.preempted) == sorted([jobs[5].pk, jobs[6].pk])
    confirm_releases()  # their cards are held until the deletes are confirmed
    assert cu(active(vision, borrowed=True)) == Decimal(1)
    assert cu(active(vision, borrowed=False)) == Decimal(4)


def test_a_device_memory_limit_keeps_a_job_pending(fleet, a100, two_projects, staff_user):
    user, vision, nlp = two_projects
    quota(staff_user, project=vision, resource_class="any", guaranteed_cu=4, memory_limit_mib=81920)
    jobs = cards(vision, user, a100, 2)
    scheduling_cycle_run()
    assert Job.objects.get(pk=jobs[0].pk).state == JobState.SCHEDULED
    assert Job.objects.get(pk=jobs[1].pk).state_reason == (
        "quota: project vision needs 81920 MiB of device memory, has 0 MiB of its 81920 MiB limit left"
    )
