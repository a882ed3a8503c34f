"""enqueue_on_commit: one way to send a Celery task after commit, which never fails its caller."""

from __future__ import annotations

import os
import uuid
from unittest import mock

import pytest
from celery import current_app
from django.db import transaction

from apps.core import task_names
from apps.core.tasks import ENQUEUE_FAILURES, enqueue_now, enqueue_on_commit
from worker.tasks.push import push_stream_task

pytestmark = pytest.mark.django_db

PUSH = task_names.PUSH_STREAM


def test_it_sends_a_registered_task_with_its_own_apply_async_only_after_commit(
    django_capture_on_commit_callbacks,
):
    with (
        mock.patch.object(push_stream_task, "apply_async") as send,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        enqueue_on_commit(PUSH, "job:7", queue="push")
        assert not send.called  # nothing before the commit
    assert len(callbacks) == 1
    send.assert_called_once_with(args=["job:7"], queue="push")


def test_a_rolled_back_transaction_sends_nothing(django_capture_on_commit_callbacks):
    with (
        mock.patch.object(push_stream_task, "apply_async") as send,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        enqueue_on_commit(PUSH, "job:8", queue="push")
        raise RuntimeError("rolled back")
    assert callbacks == [] and not send.called


def test_a_broker_outage_is_counted_and_reported_never_raised(django_capture_on_commit_callbacks):
    before = ENQUEUE_FAILURES[PUSH]
    reported = []

    def record():
        reported.append("down")
        raise ValueError("the recorder broke too")  # logged; still not the caller's problem

    with (
        mock.patch.object(push_stream_task, "apply_async", side_effect=ConnectionError("broker down")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        enqueue_on_commit(PUSH, "job:9", queue="push", on_failure=record)
    assert ENQUEUE_FAILURES[PUSH] == before + 1 and reported == ["down"]
    with mock.patch.object(push_stream_task, "apply_async", side_effect=OSError("refused")):
        assert enqueue_now(PUSH, "job:9") is False
    assert ENQUEUE_FAILURES[PUSH] == before + 2


def test_an_unregistered_task_goes_to_the_broker_by_name_with_its_arguments(
    django_capture_on_commit_callbacks,
):
    """The web process has not imported worker.tasks: the message is sent by name (real Redis broker)."""
    name = f"tests.probe_{uuid.uuid4().hex[:8]}"
    queue = "suanchi-test-enqueue-" + os.environ.get("DATABASE_URL", "x").rsplit("/", 1)[-1]
    assert current_app.tasks.get(name) is None
    with django_capture_on_commit_callbacks(execute=True):
        enqueue_on_commit(name, 41, "b", queue=queue, flag=True)
    with current_app.connection_for_read() as conn:
        inbox = conn.SimpleQueue(queue)
        try:
            message = inbox.get(timeout=10)
            message.ack()
            assert message.headers["task"] == name
            args, kwargs, _embed = message.decode()
            assert args == [41, "b"] and kwargs == {"flag": True}
        finally:
            inbox.clear()
            inbox.close()
