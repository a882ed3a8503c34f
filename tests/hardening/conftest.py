"""Fixtures for the hardening tests: two projects and three identities (the fleet is the library's)."""

from __future__ import annotations

import pytest

from apps.accounts.models import Membership
from apps.accounts.services import api_token_create


def token_for(user) -> str:
    _, key = api_token_create(user=user, name="hardening", expires_at=None, actor=user)
    return key


@pytest.fixture
def tenants(make_user, make_project):
    """A member and a viewer of project "secretvision" and an outsider who belongs only to project
    "elsewhere"."""
    member = make_user("member-m")
    outsider = make_user("outsider-o")
    project = make_project("secretvision", members=[member])
    other = make_project("elsewhere", members=[outsider])
    viewer = make_user("viewer-v")
    Membership.objects.create(user=viewer, project=project, role=Membership.Role.VIEWER)
    return {"member": member, "viewer": viewer, "outsider": outsider, "project": project, "other": other}
