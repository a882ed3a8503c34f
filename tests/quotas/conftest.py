"""Quota fixtures on the small fleet of tests/jobs/conftest.py: 8 × A100 (1.0 CU each) on gpu-01 and
gpu-02, 8 × Ascend 910B3 (0.8 CU each) on npu-01, all in one cluster."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apps.accounts.models import Department, Membership
from apps.quotas.services import quota_create
from apps.scheduling.lifecycle import job_submit
from tests.jobs.conftest import a100, ascend, fleet, half_a100, member_project  # noqa: F401  (fixtures)


@pytest.fixture
def research(db):
    return Department.objects.create(name="Research", slug="research")


@pytest.fixture
def two_projects(make_user, make_project, research):
    """Two projects of one department (a Kueue cohort) and one user who is a member of both."""
    user = make_user("alice")
    vision = make_project("vision", department=research, members=[user])
    nlp = make_project("nlp", department=research, members=[user])
    return user, vision, nlp


def quota(staff, **fields):
    for name in ("guaranteed_cu", "borrowing_limit_cu", "lending_limit_cu"):
        if fields.get(name) is not None:
            fields[name] = Decimal(str(fields[name]))
    return quota_create(actor=staff, **fields)


def submit(project, user, **fields):
    fields.setdefault("name", "job")
    fields.setdefault("image", "pytorch:2.3")
    return job_submit(project=project, actor=user, **fields)


def cards(project, user, model, n, *, prefix="j", **fields):
    """``n`` one-card jobs, submitted one after the other."""
    return [
        submit(
            project,
            user,
            name=f"{prefix}{i}",
            request_kind="whole_cards",
            device_model=model,
            count=1,
            **fields,
        )
        for i in range(n)
    ]


def set_member(user, project):
    Membership.objects.get_or_create(user=user, project=project, defaults={"role": "member"})
