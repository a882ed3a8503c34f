"""Background runs (apps/core/runs.py): the one model and service behind ledger imports, metric
backfills and month closes, its progress endpoint /runs/<id>/, and the data migration that moved the
old per-feature run rows into it."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from unittest import mock

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from apps.core import runs
from apps.core.models import BackgroundRun, ChangeRecord

Status = BackgroundRun.Status


def started(actor, kind="test.work") -> BackgroundRun:
    run = runs.run_create(kind=kind, actor=actor)
    return runs.run_start(run_id=run.pk)


def test_a_run_goes_queued_running_succeeded_once(db, staff_user):
    run = runs.run_create(kind="test.work", actor=staff_user, params={"n": 1})
    assert runs.run_start(run_id=run.pk, kind="other.work") is None  # a task of another kind
    assert (run.status, run.actor, run.actor_label, run.started_at) == (
        Status.QUEUED,
        staff_user,
        staff_user.username,
        None,
    )
    run = runs.run_start(run_id=run.pk)
    assert run.status == Status.RUNNING and run.started_at is not None
    assert runs.run_start(run_id=run.pk) is None  # a redelivered message: not queued any more
    runs.run_progress(run=run, done=4, total=4, message="writing")
    assert runs.run_finish(run=run, result={"rows": 4})
    run.refresh_from_db()
    # The last progress reaches the row even though it was published inside the test's transaction.
    assert (run.status, run.progress_done, run.progress_total, run.result) == (
        Status.SUCCEEDED,
        4,
        4,
        {"rows": 4},
    )
    assert run.finished_at is not None and run.percent == 100
    assert not runs.run_finish(run=run) and not runs.run_fail(run=run, error="late")
    run.refresh_from_db()
    assert run.status == Status.SUCCEEDED and run.error == ""


def test_a_failed_run_keeps_its_error_and_what_the_page_shows(db):
    run = started("worker")
    runs.run_progress(run=run, done=2, total=5)
    assert runs.run_fail(run=run, error="x" * 3000, result={"errors": [{"line": 3}]})
    run.refresh_from_db()
    assert run.status == Status.FAILED and len(run.error) == 2000 and run.result == {"errors": [{"line": 3}]}
    assert (run.progress_done, run.percent) == (2, 40)
    assert runs.run_start(run_id=run.pk, resume=True) is None  # over is over, even for a resume


def test_a_run_stopped_at_its_time_limit_says_so_in_both_languages(db):
    """Celery raises SoftTimeLimitExceeded inside the task at its soft limit (worker/time_limits.py);
    the work's generic "unexpected error" branch then fails the run with the time-limit reason."""
    from celery.exceptions import SoftTimeLimitExceeded

    from apps.core.stored_text import registered

    run = started("worker")
    with pytest.raises(SoftTimeLimitExceeded):
        try:
            raise SoftTimeLimitExceeded()
        except Exception:
            runs.run_fail(run=run, error="the import stopped on an unexpected error; see the worker log")
            raise
    run.refresh_from_db()
    assert (run.status, run.error) == (Status.FAILED, runs.TIME_LIMIT_REACHED)
    # A registered stored text: shown in the reader's language (its zh-hans entry is checked by
    # tests/core/test_stored_text.py::test_every_registered_text_is_in_the_catalogue_and_translated).
    assert run.error in registered()
    other = started("worker")
    runs.run_fail(run=other, error="a plain failure")  # outside the handler: the caller's words
    other.refresh_from_db()
    assert other.error == "a plain failure"


def test_progress_never_runs_past_its_total_and_keeps_unknown_parts(db):
    run = started("worker")
    runs.run_progress(run=run, done=0, total=3, message="validating")
    runs.run_progress(run=run, done=9)
    live = runs.run_progress_read(BackgroundRun.objects.get(pk=run.pk))
    assert (live["done"], live["total"], live["message"], live["percent"]) == (3, 3, "validating", 100)


def test_the_database_refuses_a_finished_run_without_a_finish_time(db):
    run = runs.run_create(kind="test.work", actor="worker")
    with pytest.raises(IntegrityError), transaction.atomic():
        BackgroundRun.objects.filter(pk=run.pk).update(status=Status.SUCCEEDED)
    with pytest.raises(IntegrityError), transaction.atomic():
        BackgroundRun.objects.filter(pk=run.pk).update(progress_done=5, progress_total=2)


@pytest.mark.django_db(transaction=True)
def test_progress_is_visible_while_the_work_s_own_transaction_is_still_open(client, staff_user):
    run = started(staff_user)
    inside, release = threading.Event(), threading.Event()

    def work() -> None:
        try:
            with transaction.atomic():  # an all-or-nothing import holds one transaction throughout
                runs.run_progress(run=run, done=3, total=10, message="validating")
                inside.set()
                release.wait(10)
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert inside.wait(10)
        client.force_login(staff_user)
        progress = client.get(f"/runs/{run.pk}/").json()
        row = BackgroundRun.objects.get(pk=run.pk)
    finally:
        release.set()
        worker.join(10)
    assert (progress["done"], progress["total"], progress["percent"], progress["message"]) == (
        3,
        10,
        30,
        "validating",
    )
    assert row.progress_done == 0  # the row alone would not have shown it


def test_only_the_runs_actor_or_staff_read_its_progress(client, make_user, staff_user):
    owner, other = make_user("owner"), make_user("other")
    run = runs.run_create(kind="test.work", actor=owner)
    anonymous = client.get(f"/runs/{run.pk}/")
    assert anonymous.status_code == 404 and anonymous.json()["error"]["code"] == "not_found"
    client.force_login(other)
    hidden = client.get(f"/runs/{run.pk}/")
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "not_found"
    assert client.get("/runs/999999/").json()["error"] == {
        "code": "not_found",
        "message": "No background run #999999.",
    }
    client.force_login(owner)
    mine = client.get(f"/runs/{run.pk}/")
    assert (
        mine.status_code == 200 and mine.json()["status"] == "queued" and mine["Cache-Control"] == "no-store"
    )
    assert "params" not in mine.json() and "result" not in mine.json()  # a ledger CSV never leaves
    client.force_login(staff_user)
    assert client.get(f"/runs/{run.pk}/").json()["id"] == run.pk
    assert client.post(f"/runs/{run.pk}/").status_code == 405


def test_a_run_is_sent_after_commit_and_never_for_a_rolled_back_transaction(
    db, django_capture_on_commit_callbacks
):
    from worker.tasks.inventory import ledger_import_task

    with mock.patch.object(ledger_import_task, "apply_async") as send:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            run = runs.run_create(kind="test.work", actor="worker")
            runs.run_enqueue(run=run, task=ledger_import_task.name)
            send.assert_not_called()  # not before the row is committed
        send.assert_called_once_with(args=[run.pk])
        with (
            django_capture_on_commit_callbacks(execute=True) as callbacks,
            pytest.raises(RuntimeError),
            transaction.atomic(),
        ):
            lost = runs.run_create(kind="test.work", actor="worker")
            runs.run_enqueue(run=lost, task=ledger_import_task.name)
            raise RuntimeError("rolled back")
        assert not callbacks and send.call_count == 1


def test_a_broker_outage_leaves_the_run_queued_and_says_so(db, django_capture_on_commit_callbacks):
    from kombu.exceptions import OperationalError

    from worker.tasks.telemetry import backfill_task

    run = runs.run_create(kind="test.work", actor="worker")
    with (
        mock.patch.object(backfill_task, "apply_async", side_effect=OperationalError("connection refused")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        runs.run_enqueue(run=run, task=backfill_task.name)  # does not raise
    run.refresh_from_db()
    assert run.status == Status.QUEUED and run.progress_message == runs.BROKER_DOWN


# ------------------------------------------------------------------ the data migration

OLD = [
    ("inventory", "0004_ledgerimportrun"),
    ("telemetry", "0002_backfillrun"),
    ("billing", "0003_bill_name_snapshot"),
]


@pytest.mark.django_db(transaction=True)
def test_the_old_run_rows_become_background_runs_and_their_audit_follows():
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(OLD)
        old = executor.loader.project_state(
            [
                *OLD,
                ("core", "0001_initial"),
                ("contenttypes", "0002_remove_content_type_name"),
                ("auth", "0012_alter_user_first_name_max_length"),
            ]
        ).apps
        ContentType = old.get_model("contenttypes", "ContentType")
        User = old.get_model("auth", "User")
        User.objects.create(username="alice", is_staff=True)
        cluster = old.get_model("inventory", "Cluster").objects.create(name="bj1", slug="bj1")
        source = old.get_model("telemetry", "MetricSource").objects.create(
            cluster=cluster, name="prom", kind="prometheus", url="http://127.0.0.1:9/"
        )
        imported = old.get_model("inventory", "LedgerImportRun").objects.create(
            text="cluster,node\n",
            rows=1,
            state="done",
            report={"created_devices": 3},
            requested_by="alice",
            finished_at=timezone.now(),
        )
        waiting = old.get_model("inventory", "LedgerImportRun").objects.create(
            text="x\n",
            state="queued",
            error_message="could not reach the task broker; the import is still queued",
        )
        start = datetime(2026, 9, 1, tzinfo=UTC)
        old.get_model("telemetry", "BackfillRun").objects.create(
            source=source,
            start=start,
            end=start.replace(day=2),
            state="failed",
            done_chunks=5,
            total_chunks=24,
            error="prometheus said no",
            requested_by="bob",
            finished_at=timezone.now(),
        )
        closing = old.get_model("billing", "BillingPeriod").objects.create(
            month=date(2026, 9, 1),
            state="closing",
            progress_done=2,
            progress_total=7,
            progress_message="bill 2/7: a",
        )
        old.get_model("billing", "BillingPeriod").objects.create(month=date(2026, 10, 1), state="open")
        import_type = ContentType.objects.get_or_create(app_label="inventory", model="ledgerimportrun")[0]
        old.get_model("core", "ChangeRecord").objects.create(
            action="inventory.ledger_import_request",
            content_type=import_type,
            object_id=str(imported.pk),
            object_repr="ledger import",
        )

        executor = MigrationExecutor(connection)
        executor.migrate(latest)

        ledger = BackgroundRun.objects.get(kind="inventory.ledger_import", params__legacy_id=imported.pk)
        assert (ledger.status, ledger.result["report"], ledger.params["rows"]) == (
            "succeeded",
            {"created_devices": 3},
            1,
        )
        assert ledger.actor.username == "alice" and ledger.finished_at is not None
        queued = BackgroundRun.objects.get(kind="inventory.ledger_import", params__legacy_id=waiting.pk)
        assert queued.status == "queued" and "task broker" in queued.progress_message and queued.actor is None
        record = ChangeRecord.objects.get(action="inventory.ledger_import_request")
        assert (record.content_type.model, record.object_id) == ("backgroundrun", str(ledger.pk))
        filled = BackgroundRun.objects.get(kind="telemetry.backfill")
        assert (filled.status, filled.error, filled.progress_done, filled.progress_total) == (
            "failed",
            "prometheus said no",
            5,
            24,
        )
        assert filled.params["source"] == source.pk and filled.params["start"] == start.isoformat()
        assert filled.actor is None and filled.actor_label == "bob"  # no such user: the label stays
        from apps.billing.models import BillingPeriod

        september = BillingPeriod.objects.select_related("close_run").get(pk=closing.pk)
        assert (september.progress_done, september.progress_total, september.progress_percent) == (2, 7, 28)
        assert september.close_run.status == "running" and september.progress_message == "bill 2/7: a"
        assert BillingPeriod.objects.get(month=date(2026, 10, 1)).close_run is None
    finally:
        MigrationExecutor(connection).migrate(latest)
