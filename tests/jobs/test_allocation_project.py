"""``Allocation.project``: the job's project, copied onto every allocation however it is written (the
scheduling cycle's COPY, save(), the migration's backfill), so the quotas overview sums by it
without joining jobs (issue 31)."""

from __future__ import annotations

import pytest

from apps.inventory.models import Device
from apps.jobs.models import Allocation
from apps.scheduling import services
from tests.fixtures.jobs import submit_whole_cards, whole_card_allocation

pytestmark = pytest.mark.django_db


def test_the_scheduling_cycle_writes_the_jobs_project(fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(project, user, a100, 2, name="a")
    services.scheduling_cycle_run()
    rows = list(Allocation.objects.filter(job=job).values_list("project_id", flat=True))
    assert rows and set(rows) == {project.pk}


def test_save_fills_the_project_from_the_job(fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(project, user, a100, 1, name="b")
    allocation = whole_card_allocation(job, Device.objects.filter(device_model=a100).first())
    allocation.refresh_from_db()
    assert allocation.project_id == project.pk
