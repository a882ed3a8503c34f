"""Billing's own fixture: September 2026 closed with a bill for alice's project "vision" and one for
"secret-llm" (the fleet, jobs and allocations are the shared library's, tests/fixtures/)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from apps.billing import services
from apps.billing.models import Bill
from tests.fixtures.billing import local

SEP = date(2026, 9, 1)


@pytest.fixture
def closed_september(make_user, make_project, devices, make_job, make_allocation):
    services.rate_card_create(
        actor="test", name="default", price_per_cu_hour=Decimal("10"), effective_from=date(2026, 1, 1)
    )
    alice = make_user("alice")
    mine = make_project("vision", members=[alice])
    theirs = make_project("secret-llm")
    make_allocation(make_job(mine, name="mine-job"), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 2))
    make_allocation(
        make_job(theirs, name="their-job"), devices[1], local(2026, 9, 1, 0), local(2026, 9, 1, 5)
    )
    services.month_close(month=SEP, actor="test")
    return alice, Bill.objects.get(project=mine), Bill.objects.get(project=theirs)
