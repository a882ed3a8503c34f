"""Users and API clients shared by the catalog tests."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient


@pytest.fixture
def member(db):
    return get_user_model().objects.create_user(username="member", password="pw")


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user(username="ops", password="pw", is_staff=True)


def api_as(user=None) -> APIClient:
    """An API client, authenticated as ``user`` unless it is None (anonymous)."""
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client
