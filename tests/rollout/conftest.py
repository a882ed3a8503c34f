"""Rollout's own fixtures: an API client signed in as staff, and an inference job placed on the shared fleet
(tests/fixtures/inventory.py). The soak criteria, ``now`` and ``ingest_soak`` are the library's
(tests/fixtures/rollout.py)."""

from __future__ import annotations

import pytest

from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards


@pytest.fixture
def staff_client(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    return api_client


@pytest.fixture
def service(fleet, member_project, a100):
    user, project = member_project
    job = submit_whole_cards(
        project, user, a100, name="serve", kind="inference", image="vllm:0.6", replicas=1
    )
    assert job.pk in scheduling_cycle_run().placed_job_ids
    job.refresh_from_db()
    return job
