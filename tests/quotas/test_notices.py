"""The daily quota check (``apps.quotas.notices.quota_check``, the task ``quota_check_task``): a project
whose quota use reached 90 % of what it may ever hold is told once a day, through ``notify``."""

from __future__ import annotations

import pytest

from apps.notify import services
from apps.notify.models import Delivery, Event
from apps.quotas.notices import quota_check
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.quotas import cards, quota

pytestmark = pytest.mark.django_db


def test_a_project_at_its_quota_is_told_once_a_day(fleet, a100, make_user, make_project, staff_user):
    alice = make_user("alice")
    vision = make_project("vision", members=[alice], role="admin")
    sub = services.subscription_create(
        actor=staff_user,
        channel="email",
        target="ops@example.com",
        events=[Event.QUOTA_NEARLY_EXHAUSTED],
        project=vision,
    )
    quota(
        staff_user,
        project=vision,
        resource_class="vendor",
        vendor="nvidia",
        guaranteed_cu=2,
        borrowing_limit_cu=0,
    )
    assert quota_check() == 0  # nothing used yet
    cards(vision, alice, a100, 2)
    scheduling_cycle_run()

    assert quota_check() == 1
    (delivery,) = Delivery.objects.filter(subscription=sub)
    assert delivery.event == Event.QUOTA_NEARLY_EXHAUSTED
    assert "Project vision uses 2.00 of 2.00 CU its quota allows." in delivery.payload["message"]
    assert quota_check() == 0  # the same day: already told


def test_the_worker_task_runs_the_check(monkeypatch):
    import worker.tasks.notify as tasks

    monkeypatch.setattr(tasks, "quota_check", lambda: 3)
    assert tasks.quota_check_task.run() == 3
