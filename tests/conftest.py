"""Shared fixtures: users, tenancy and an API client. Tests run on real PostgreSQL and Redis."""

from __future__ import annotations

import itertools

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.utils import translation
from rest_framework.test import APIClient

from apps.accounts.models import Department, Membership, Project

_seq = itertools.count(1)


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _forget_watched_views():
    """The per-process list+watch views of Kubernetes clusters (apps.clusters.backend.WatchedView) are
    keyed by cluster row and API server address: one test's view must not answer for a later test's
    cluster that happens to get the same key."""
    from apps.clusters.backend import WatchedView

    WatchedView.forget()
    yield
    WatchedView.forget()


@pytest.fixture(autouse=True)
def _language_back_to_default():
    """LocaleMiddleware activates the request's language on the test's own thread and never
    deactivates it: without this, one zh-hans request turns every later test's messages Chinese."""
    yield
    translation.activate(settings.LANGUAGE_CODE)


@pytest.fixture
def english():
    """English for the test, whatever an earlier one activated (the messages asserted are the
    English ones), and again after it. Use as ``pytest.mark.usefixtures("english")``."""
    translation.activate("en")
    yield
    translation.activate("en")


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def make_user(db):
    def make(username: str | None = None, *, staff: bool = False, password: str = "pw-For-tests-1"):
        name = username or f"user{next(_seq)}"
        user = get_user_model().objects.create_user(
            username=name, password=password, is_staff=staff, is_superuser=staff
        )
        return user

    return make


@pytest.fixture
def staff_user(make_user):
    return make_user("platform-admin", staff=True)


@pytest.fixture
def make_project(db):
    def make(slug: str | None = None, *, department: Department | None = None, members=(), role="member"):
        slug = slug or f"proj{next(_seq)}"
        department = (
            department
            or Department.objects.get_or_create(slug="dept-default", defaults={"name": "Default department"})[
                0
            ]
        )
        project = Project.objects.create(department=department, name=slug, slug=slug, namespace=slug)
        for user in members:
            Membership.objects.create(user=user, project=project, role=role)
        return project

    return make
