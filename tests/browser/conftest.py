"""Browser tests: Playwright driving Debian's Chromium against the live server.

A real Celery worker (solo pool, in this process) consumes the scheduler and push queues on the
test Redis broker, so a job submitted through the form is scheduled and pushed to the simulated
cluster exactly as in the demo. Screenshots go to ``$SUANCHI_TEST_OUTPUT/screenshots`` (default
``test-output/screenshots``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker
from django.core.management import call_command
from playwright.sync_api import sync_playwright

from tests.fixtures import jobs as jobs_fixtures
from worker.celery import app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
OUTPUT = Path(os.environ.get("SUANCHI_TEST_OUTPUT", "test-output"))
PASSWORD = "browser-test-pass-1"


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (scripts/services.sh does)")
    # Playwright's sync API keeps an event loop in this thread; Django's ORM calls here are still
    # synchronous, so its async-safety guard is lifted for the browser tests only.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def screenshots() -> Path:
    folder = OUTPUT / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def demo(transactional_db, capsys):
    call_command("load_demo")
    capsys.readouterr()


@pytest.fixture
def worker(transactional_db):
    """A Celery worker for the scheduler and push queues (stale messages from earlier runs purged)."""
    with app.connection_for_write() as conn:
        for queue in ("scheduler", "push"):
            conn.default_channel.queue_purge(queue)
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=["scheduler", "push"], loglevel="WARNING"
    ) as w:
        yield w


def login(page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.press("input[name=password]", "Enter")
    page.wait_for_load_state("networkidle")


def switch_language(page, language: str) -> None:
    """The header's language select submits itself on change."""
    with page.expect_navigation():
        page.select_option("#language-select", language)
    page.wait_for_load_state("networkidle")


def submit_whole_card(user, project, device_model, name: str, **extra):
    """``user`` (whose password becomes PASSWORD, to log in with) submits a one-card job."""
    user.set_password(PASSWORD)
    user.save()
    return jobs_fixtures.submit_whole_cards(
        project, user, device_model, name=name, image="pytorch:2.3", **extra
    )
