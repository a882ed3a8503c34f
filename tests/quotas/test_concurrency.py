"""50 threads submit and run scheduling cycles at once on PostgreSQL: no project ever ends up over its
guarantee or its borrowing limit (admissions are serialized by the quota row locks)."""

from __future__ import annotations

import threading
from collections import defaultdict
from decimal import Decimal

import pytest
from django.db import connection

from apps.jobs.models import Allocation, Job, JobState
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.quotas import quota, submit

THREADS = 50


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_submissions_and_cycles_never_overrun_a_quota(
    fleet, a100, ascend, two_projects, staff_user
):
    user, vision, nlp = two_projects
    quota(staff_user, project=vision, resource_class="any", guaranteed_cu=3, borrowing_limit_cu=1)
    quota(staff_user, project=nlp, resource_class="any", guaranteed_cu=2, borrowing_limit_cu="1.6")
    limits = {vision.pk: (Decimal(3), Decimal(1)), nlp.pk: (Decimal(2), Decimal("1.6"))}
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            project = vision if i % 2 else nlp
            barrier.wait(timeout=30)
            if i % 3:
                submit(project, user, name=f"a{i}", request_kind="whole_cards", device_model=a100)
            else:
                submit(project, user, name=f"n{i}", request_kind="whole_cards", device_model=ascend)
            scheduling_cycle_run()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors[:3]
    scheduling_cycle_run()
    assert Job.objects.count() == THREADS
    used = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for a in Allocation.objects.filter(released_at__isnull=True).select_related("job"):
        used[a.job.project_id][1 if a.borrowed else 0] += a.compute_units
    for project_id, (guaranteed, borrowing) in limits.items():
        assert used[project_id][0] <= guaranteed
        assert used[project_id][1] <= borrowing
    # Both projects are full up to their ceilings (within one card's CU), the rest wait with a reason.
    assert used[vision.pk][0] + used[vision.pk][1] > Decimal(3)
    pending = Job.objects.filter(state=JobState.PENDING)
    assert pending.exists() and all(j.state_reason for j in pending)
    # Every job is either scheduled with allocations or pending without any.
    for job in Job.objects.all():
        has = Allocation.objects.filter(job=job, released_at__isnull=True).exists()
        assert has == (job.state == JobState.SCHEDULED)
