"""The billing API's refusals, through the shared contract (tests/api_contract.py): members read their
projects' bills; changing a bill, adjusting and closing a month are staff's."""

from __future__ import annotations

import pytest

from apps.billing.models import Adjustment
from tests.api_contract import APIContract, Case, Endpoint

pytestmark = pytest.mark.django_db
BILLS = "/api/billing/bills/"
BILL = BILLS + "{pk}/"


class TestBills(APIContract):
    endpoint = Endpoint(
        list=BILLS,
        detail=BILL,
        detail_reads=(BILL + "export/?format=pdf",),
        staff_writes=(
            ("patch", BILL, {"total": "1"}),
            ("post", BILL + "finalize/", {}),
            ("post", "/api/billing/adjustments/", {"project": "vision", "amount": "-1.00", "reason": "x"}),
            ("post", "/api/billing/periods/close/", {"month": "2026-09"}),
        ),
        not_allowed=(("delete", BILL), ("post", BILLS)),
        json_write=("post", "/api/billing/adjustments/"),
    )

    @pytest.fixture
    def case(self, closed_september, outsider, staff_user):
        alice, mine, _theirs = closed_september
        return Case(
            pk=mine.pk,
            member=alice,
            outsider=outsider,
            staff=staff_user,
            member_sees=[mine.pk],
            count=Adjustment.objects.count,
        )
