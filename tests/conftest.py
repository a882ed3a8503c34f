"""What every test gets: the shared fixture library (tests/fixtures/, one module per app, listed in
``pytest_plugins``) and the per-test resets. Tests run on real PostgreSQL and Redis."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.cache import cache
from django.utils import translation

pytest_plugins = [
    "tests.fixtures.accounts",
    "tests.fixtures.catalog",
    "tests.fixtures.inventory",
    "tests.fixtures.jobs",
    "tests.fixtures.quotas",
    "tests.fixtures.migration",
    "tests.fixtures.rollout",
    "tests.fixtures.telemetry",
    "tests.fixtures.prometheus",
    "tests.fixtures.billing",
]


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _reset_process_state():
    """Per-process state (apps.core.process_state: the list+watch views of Kubernetes clusters, the
    scheduler's snapshot cache and parked jobs) is dropped around every test: one test's view or
    cache must not answer for a later test's rows that happen to get the same key."""
    from apps.core.process_state import reset_process_state

    reset_process_state()
    yield
    reset_process_state()


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
