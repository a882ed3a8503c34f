"""UsageEntry.allocation keeps PROTECT without a database foreign key (billing 0008): deleting an
allocation while a metering run writes its entries must not leave entries naming an allocation that is
gone. Django's PROTECT reads the committed entries only (the run's are not yet), so without a lock or a
constraint the delete went through and the run committed its entries after it (3 orphan entries at
billing 0008; billing 0010's delete trigger waits for the run and refuses). Two real PostgreSQL
sessions (threads)."""

from __future__ import annotations

import threading
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from apps.billing import services
from apps.billing.models import UsageEntry
from apps.jobs.models import Allocation
from tests.fixtures.billing import local

pytestmark = pytest.mark.django_db(transaction=True)


def _closing(work):
    """``work`` for a thread of its own: its database session closed when done."""

    def run():
        try:
            return work()
        finally:
            connection.close()

    return run


def test_an_allocation_deleted_under_a_metering_run_leaves_no_entry_without_it(
    make_project, devices, make_job, make_allocation
):
    services.rate_card_create(
        actor="test", name="only", price_per_cu_hour=Decimal("10"), effective_from=date(2026, 1, 1)
    )
    allocation = make_allocation(
        make_job(make_project("vision"), name="race"), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3)
    )
    metered, release = threading.Event(), threading.Event()

    def meter():
        with transaction.atomic():
            done = services.metering_run(start=local(2026, 9, 1), end=local(2026, 9, 2), actor="test")
            metered.set()  # its entries written, not committed
            release.wait(60)
        return done.created

    with ThreadPoolExecutor(max_workers=2) as pool:
        metering = pool.submit(_closing(meter))
        assert metered.wait(60)
        deleting = pool.submit(_closing(Allocation.objects.filter(pk=allocation.pk).delete))
        futures.wait([deleting], timeout=10)  # done unless it waits for the run (a lock)
        release.set()  # the run commits; then the delete, if it waited, goes on or fails
        outcomes = [f.exception() or f.result() for f in (metering, deleting)]
    allocations = set(Allocation.objects.values_list("pk", flat=True))
    orphans = UsageEntry.objects.exclude(allocation_id__in=allocations).count()
    assert orphans == 0, (orphans, outcomes)
    assert outcomes[0] == 3 and isinstance(outcomes[1], IntegrityError)
    assert Allocation.objects.filter(pk=allocation.pk).exists()
