"""Allocation start times are stamped after the cycle's locks (and the reads they protect), never
before a lock wait; and the per-project compute-unit replay (apps.scheduling.invariants) shows no
project above what its quota admits, even when a release commits while a cycle waits for a lock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.invariants import (
    CuInterval,
    cu_overruns,
    cu_peaks,
    project_cu_intervals,
    project_cu_limits,
    project_cu_overruns,
)
from apps.scheduling.lifecycle import job_finish
from apps.scheduling.services import scheduling_cycle_run, unschedulable_queue
from tests.fixtures.quotas import quota, submit

HOLD_S = 1.0


def _wait_for_a_blocked_session(timeout: float = 30.0) -> None:
    """Until another session of this database waits for a row lock (pg_stat_activity)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    pytest.fail("the scheduling cycle never waited for the job's row lock")


class _JobRowHolder(threading.Thread):
    """Holds ``SELECT … FOR UPDATE`` on one job row in its own connection until told to let go,
    as another cycle (or a cancel) would; records when it let go."""

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.locked = threading.Event()
        self.let_go = threading.Event()
        self.released_at: datetime | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=self.job_id)
                self.locked.set()
                self.let_go.wait(timeout=60)
                self.released_at = timezone.now()  # the commit (the lock's release) comes after this
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.locked.set()
            connection.close()


class _Cycle(threading.Thread):
    def __init__(self) -> None:
        super().__init__()
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = scheduling_cycle_run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            connection.close()


@pytest.mark.django_db(transaction=True)
def test_started_at_is_after_the_job_row_lock_the_cycle_waited_for(fleet, a100, two_projects):
    user, vision, _nlp = two_projects
    job = submit(vision, user, name="waits", request_kind="whole_cards", device_model=a100, count=1)
    holder = _JobRowHolder(job.pk)
    holder.start()
    assert holder.locked.wait(timeout=30) and holder.error is None
    cycle = _Cycle()
    cycle.start()
    _wait_for_a_blocked_session()
    time.sleep(HOLD_S)
    holder.let_go.set()
    holder.join(timeout=30)
    cycle.join(timeout=60)
    assert holder.error is None and cycle.error is None, (holder.error, cycle.error)
    assert job.pk in cycle.result.placed_job_ids
    allocation = Allocation.objects.get(job=job)
    # Stamped before the lock wait it would be about HOLD_S earlier than the release.
    assert allocation.started_at >= holder.released_at
    assert Job.objects.get(pk=job.pk).state_changed_at >= holder.released_at


@pytest.mark.django_db(transaction=True)
def test_a_release_committed_during_a_lock_wait_never_overlaps_the_admitted_job(
    fleet, a100, two_projects, staff_user
):
    """3 CU guaranteed, nothing to borrow. A (3 cards) runs; B (3 cards) waits on the quota. A cycle
    loads B and waits for B's row lock; meanwhile A finishes. The cycle then admits B — and B must
    not have started before A was released, or the replay shows vision holding 6 CU."""
    user, vision, _nlp = two_projects
    quota(staff_user, project=vision, resource_class="any", guaranteed_cu=3, borrowing_limit_cu=0)
    first = submit(vision, user, name="a", request_kind="whole_cards", device_model=a100, count=3)
    assert first.pk in scheduling_cycle_run().placed_job_ids
    second = submit(vision, user, name="b", request_kind="whole_cards", device_model=a100, count=3)
    assert scheduling_cycle_run().quota_pending == 1
    # B is parked now (it waits on quota: only a release or a quota change wakes it). This scenario is
    # a cycle that examines B anyway — a fresh worker process, or the flush interval passed — so the
    # parked set is emptied, as in a new process.
    unschedulable_queue().clear()

    holder = _JobRowHolder(second.pk)
    holder.start()
    assert holder.locked.wait(timeout=30) and holder.error is None
    cycle = _Cycle()
    cycle.start()
    _wait_for_a_blocked_session()
    assert job_finish(job=Job.objects.get(pk=first.pk), succeeded=True, actor="test")  # commits now
    time.sleep(0.2)
    holder.let_go.set()
    holder.join(timeout=30)
    cycle.join(timeout=60)
    assert holder.error is None and cycle.error is None, (holder.error, cycle.error)
    assert second.pk in cycle.result.placed_job_ids
    assert Job.objects.get(pk=second.pk).state == JobState.SCHEDULED

    assert project_cu_limits() == {vision.pk: Decimal(3)}
    peaks = cu_peaks(project_cu_intervals())
    assert peaks[vision.pk].peak_cu == Decimal(3), peaks[vision.pk]
    assert project_cu_overruns() == []


T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def _iv(pk: int, key: int, start_min: float, end_min: float | None, cu: str) -> CuInterval:
    return CuInterval(
        allocation_id=pk,
        key=key,
        start=T0 + timedelta(minutes=start_min),
        end=None if end_min is None else T0 + timedelta(minutes=end_min),
        compute_units=Decimal(cu),
    )


def test_the_replay_treats_intervals_as_half_open():
    # One job released at 10:00 and the next started at 10:00 never held capacity together.
    intervals = [_iv(1, 7, 0, 10, "3"), _iv(2, 7, 10, None, "3")]
    assert cu_peaks(intervals)[7].peak_cu == Decimal(3)
    assert cu_overruns(intervals, {7: Decimal(3)}) == []


def test_the_replay_reports_the_peak_and_every_stretch_above_the_ceiling():
    intervals = [
        _iv(1, 7, 0, 10, "3"),
        _iv(2, 7, 9.99, 20, "3"),  # backdated by 0.6 s against the release of 1: 6 CU
        _iv(3, 7, 30, 40, "2"),
        _iv(4, 7, 35, None, "2"),  # 4 CU from 35 to 40, then 2 CU still active
        _iv(5, 7, 50, 50, "9"),  # released the moment it started: held nothing
        _iv(6, 8, 0, None, "100"),  # another project without quotas: unlimited, not checked
    ]
    peak = cu_peaks(intervals)[7]
    assert (peak.peak_cu, peak.at, peak.allocations) == (Decimal(6), T0 + timedelta(minutes=9.99), [1, 2])
    overruns = cu_overruns(intervals, {7: Decimal(3)})
    assert [(o.start, o.end, o.peak_cu, o.allocations) for o in overruns] == [
        (T0 + timedelta(minutes=9.99), T0 + timedelta(minutes=10), Decimal(6), [1, 2]),
        (T0 + timedelta(minutes=35), T0 + timedelta(minutes=40), Decimal(4), [3, 4]),
    ]
    assert overruns[0].as_dict()["limit_cu"] == "3"
    still = cu_overruns([_iv(1, 7, 0, None, "5")], {7: Decimal(3)})
    assert len(still) == 1 and still[0].end is None
