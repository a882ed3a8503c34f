"""A usage entry's rate card has no database foreign key (billing 0009): deleting a rate card while a
metering run prices entries with it is refused (409) once the run commits, never leaves entries naming a
card that is gone; a card deleted first is gone from the prices the run reads. A run whose plain INSERT
meets entries another run committed meanwhile inserts around them. Two real PostgreSQL sessions
(threads), synchronized on the lock one of them waits for."""

from __future__ import annotations

import threading
from datetime import date
from decimal import Decimal

import pytest
from django.db import connection, transaction

from apps.billing import services
from apps.billing.models import RateCard, UsageEntry
from apps.billing.services import metering
from apps.core.errors import Conflict
from tests.fixtures.billing import local
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _another_session_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def _wait_until_blocked() -> None:
    wait_until(
        _another_session_waits_for_a_lock, 30, step=0.02, what="the other session to wait for the lock"
    )


def _in_thread(work, results: dict, key: str) -> threading.Thread:
    def run() -> None:
        try:
            results[key] = work()
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            results[key] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _meter_september_1st() -> int:
    return services.metering_run(start=local(2026, 9, 1), end=local(2026, 9, 2), actor="test").created


@pytest.fixture
def priced_allocation(make_project, devices, make_job, make_allocation):
    card = services.rate_card_create(
        actor="test", name="only", price_per_cu_hour=Decimal("10"), effective_from=date(2026, 1, 1)
    )
    job = make_job(make_project("vision"), name="race")
    make_allocation(job, devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    return card


def test_deleting_a_rate_card_under_a_metering_run_is_refused_after_it_commits(priced_allocation):
    card, results = priced_allocation, {}
    metered, release = threading.Event(), threading.Event()

    def meter():
        with transaction.atomic():
            done = services.metering_run(start=local(2026, 9, 1), end=local(2026, 9, 2), actor="test")
            metered.set()
            assert release.wait(30)
        return done.created

    metering = _in_thread(meter, results, "meter")
    assert metered.wait(30)
    deleting = _in_thread(lambda: services.rate_card_delete(card=card, actor="test"), results, "delete")
    _wait_until_blocked()  # the delete waits for the metering run's lock on the card
    release.set()
    metering.join(30)
    deleting.join(30)
    assert results["meter"] == 3
    assert isinstance(results["delete"], Conflict)
    assert results["delete"].status_code == 409 and results["delete"].code == "rate_card_in_use"
    assert RateCard.objects.filter(pk=card.pk).exists()
    assert set(UsageEntry.objects.values_list("rate_card_id", flat=True)) == {card.pk}


def test_a_rate_card_deleted_first_is_not_used_by_a_run_that_waited(priced_allocation, devices):
    default, results = priced_allocation, {}
    # The card the run would pick (its model's), deleted in a transaction the run has to wait for.
    card = services.rate_card_create(
        actor="test",
        name="A100",
        scope="device_model",
        device_model=devices[0].device_model,
        price_per_cu_hour=Decimal("7"),
        effective_from=date(2026, 1, 1),
    )
    deleted, release = threading.Event(), threading.Event()

    def delete():
        with transaction.atomic():
            services.rate_card_delete(card=card, actor="test")
            deleted.set()
            assert release.wait(30)

    deleting = _in_thread(delete, results, "delete")
    assert deleted.wait(30)
    metering = _in_thread(_meter_september_1st, results, "meter")
    _wait_until_blocked()  # the run waits for the delete before it reads a price
    release.set()
    deleting.join(30)
    metering.join(30)
    assert results["delete"] is None
    assert not RateCard.objects.filter(pk=card.pk).exists()
    assert results["meter"] == 3
    assert set(UsageEntry.objects.values_list("rate_card_id", flat=True)) == {default.pk}


def test_a_run_that_meets_entries_committed_meanwhile_inserts_around_them(priced_allocation):
    """Both runs see no stored entry of the allocation, so both take the plain INSERT; the later one
    meets the first one's committed slice (unique violation) and inserts the others around it."""
    results, first_written, release = {}, threading.Event(), threading.Event()
    assert "ON CONFLICT" not in metering._INSERT_NEW_SQL and "ON CONFLICT" in metering._INSERT_SQL

    def first_hour():
        with transaction.atomic():
            done = services.metering_run(start=local(2026, 9, 1, 0), end=local(2026, 9, 1, 1), actor="a")
            first_written.set()
            assert release.wait(30)
        return done.created

    first = _in_thread(first_hour, results, "first")
    assert first_written.wait(30)
    whole = _in_thread(_meter_september_1st, results, "whole")
    _wait_until_blocked()  # the second run's INSERT waits on the first one's uncommitted slice
    release.set()
    first.join(30)
    whole.join(30)
    assert (results["first"], results["whole"]) == (1, 2)
    starts = list(UsageEntry.objects.order_by("slice_start").values_list("slice_start", flat=True))
    assert starts == [local(2026, 9, 1, h) for h in range(3)]
