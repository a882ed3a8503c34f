"""Queueing hints: a job that did not fit waits, without being re-examined, until something it could
use changes (kube-scheduler's unschedulable queue and QueueingHints, KEP-4247)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.inventory.models import Device, Node
from apps.jobs.models import QUEUED_STATES, Allocation, Job, JobState
from apps.scheduling import persist, services
from apps.scheduling.models import DecisionTrace
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


def _submit(project, user, model, count, name, **extra):
    return submit_whole_cards(project, user, model, count, name=name, **extra)


def _end(job: Job) -> None:
    """Another process ends the job and releases its cards."""
    Allocation.objects.filter(job=job).update(released_at=timezone.now(), release_reason="finished")
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)


@pytest.fixture
def full(fleet, member_project, a100, ascend):
    """Both A100 nodes and the Ascend node busy; one A100 job and one Ascend job waiting."""
    user, project = member_project
    busy = [_submit(project, user, a100, 4, "a1"), _submit(project, user, a100, 4, "a2")]
    busy.append(_submit(project, user, ascend, 8, "n1"))
    assert services.scheduling_cycle_run().placed == 3
    waiting = _submit(project, user, a100, 4, "wait-a100")
    waiting_npu = _submit(project, user, ascend, 8, "wait-npu")
    first = services.scheduling_cycle_run()
    assert first.considered == 2 and first.placed == 0 and first.parked == 0
    return user, project, busy, waiting, waiting_npu


def test_a_pending_job_is_parked_and_keeps_its_explanation(full):
    _user, _project, _busy, waiting, waiting_npu = full
    traces = DecisionTrace.objects.filter(job=waiting).count()
    reason = Job.objects.get(pk=waiting.pk).state_reason
    assert reason
    again = services.scheduling_cycle_run()
    assert again.considered == 0 and again.parked == 2 and again.pending == 2
    assert DecisionTrace.objects.filter(job=waiting).count() == traces
    assert Job.objects.get(pk=waiting.pk).state_reason == reason


def test_capacity_freed_on_the_matching_model_wakes_only_jobs_that_can_use_it(full):
    _user, _project, busy, waiting, waiting_npu = full
    _end(busy[0])  # four A100 cards free: the Ascend job has no use for them
    result = services.scheduling_cycle_run()
    assert result.placed_job_ids == [waiting.pk]
    assert result.considered == 1 and result.parked == 1
    _end(busy[2])  # the Ascend node frees up
    result = services.scheduling_cycle_run()
    assert result.placed_job_ids == [waiting_npu.pk]


def test_a_node_added_wakes_every_parked_job(full, a100):
    gpu01 = Node.objects.get(name="gpu-01")
    node = Node.objects.create(
        cluster=gpu01.cluster, pool=gpu01.pool, name="gpu-03", driver_version="550.54.15", taints=gpu01.taints
    )
    for i in range(4):
        Device.objects.create(node=node, vendor="nvidia", index=i, device_model=a100, uuid=f"GPU-03-{i}")
    result = services.scheduling_cycle_run()
    assert result.considered == 2 and result.parked == 0
    assert result.placed == 1  # the A100 job on the new node; the Ascend job examined, still pending


def test_an_uncordoned_card_wakes_parked_jobs(full):
    _user, _project, busy, waiting, _npu = full
    node = Allocation.objects.filter(job=busy[0]).values_list("node__name", flat=True).first()
    _end(busy[0])
    Device.objects.filter(node__name=node).update(cordoned=True)  # freed but cordoned
    result = services.scheduling_cycle_run()
    assert result.placed == 0 and waiting.pk not in result.placed_job_ids
    assert services.scheduling_cycle_run().considered == 0  # parked again: nothing changed since
    Device.objects.filter(node__name=node).update(cordoned=False)
    assert services.scheduling_cycle_run().placed_job_ids == [waiting.pk]


def test_an_edited_job_is_re_examined(full):
    _user, _project, _busy, waiting, _npu = full
    job = Job.objects.get(pk=waiting.pk)
    job.count = 2
    job.save()
    result = services.scheduling_cycle_run()
    assert result.considered == 1 and result.parked == 1


def test_parked_jobs_are_flushed_after_the_safety_interval(full, monkeypatch):
    monkeypatch.setattr(services, "UNSCHEDULABLE_FLUSH_S", 0.0)
    result = services.scheduling_cycle_run()
    assert result.considered == 2 and result.parked == 0


def test_hints_switched_off_examine_every_job(full, settings):
    settings.SUANCHI = {**settings.SUANCHI, "QUEUEING_HINTS": False}
    assert services.scheduling_cycle_run().considered == 2


def test_woken_jobs_keep_priority_order(full, a100):
    user, project, busy, waiting, _npu = full
    urgent = _submit(project, user, a100, 4, "urgent", priority_class="high")
    assert services.scheduling_cycle_run().placed == 0  # examined once, parked
    _end(busy[0])
    result = services.scheduling_cycle_run()
    assert result.placed_job_ids == [urgent.pk]  # the higher priority gets the freed node
    assert Job.objects.get(pk=waiting.pk).state in QUEUED_STATES


def test_an_event_on_the_jobs_model_wakes_it(full, a100):
    """The event the snapshot cache reports when cards of the job's model are released."""
    _user, _project, _busy, waiting, _npu = full
    hints = services.unschedulable_queue()
    seq = hints.seq
    stamp = services._micros(Job.objects.get(pk=waiting.pk).updated_at)
    assert hints.waiting(waiting.pk, stamp, 0.0) is True
    # A release this cycle observed on an A100 card:
    hints.freed("nvidia", a100.name)
    assert hints.seq == seq + 1
    assert hints.waiting(waiting.pk, stamp, 0.0) is False


def test_a_placement_dropped_at_persist_wakes_only_the_jobs_examined_after_it(
    fleet, member_project, a100, monkeypatch
):
    """A job placed by the engine whose objects are refused every cycle (e.g. Huawei fractions in the
    plain device-plugin mode) gives its cards back at persist time. Only the jobs examined after it in
    that cycle saw them taken; the parked backlog of the same model and the job itself stay parked
    (before: every parked job was woken, every cycle; issue 31 §2)."""
    user, project = member_project
    _submit(project, user, a100, 4, "a1")
    _submit(project, user, a100, 2, "a2")  # two A100 cards stay free
    assert services.scheduling_cycle_run().placed == 2
    backlog = [_submit(project, user, a100, 4, f"backlog{i}") for i in range(2)]
    assert services.scheduling_cycle_run().placed == 0  # examined once, parked
    refused = _submit(project, user, a100, 2, "refused")
    late = _submit(project, user, a100, 2, "late")  # queued after it: it saw its cards taken
    objects = persist._RenderContext.objects  # the persist step's renderer refuses this one job
    monkeypatch.setattr(
        persist._RenderContext,
        "objects",
        lambda self, job, rows: (
            (None, "ValueError: no manifest") if job.pk == refused.pk else objects(self, job, rows)
        ),
    )
    first = services.scheduling_cycle_run()
    assert (first.considered, first.parked, first.placed) == (2, 2, 0)
    assert first.pending_error_ids == [refused.pk] and first.pending_fit_ids == [late.pk]
    second = services.scheduling_cycle_run()
    assert (second.considered, second.parked) == (1, 3)  # the backlog and the refused job stay parked
    assert second.placed_job_ids == [late.pk]  # re-examined: it gets the cards the refused job gave back
    third = services.scheduling_cycle_run()
    assert (third.considered, third.parked) == (0, 3)
    assert {j.pk for j in backlog} | {refused.pk} <= set(services.unschedulable_queue().parked)
    assert "could not be rendered" in Job.objects.get(pk=refused.pk).state_reason
