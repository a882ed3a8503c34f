"""The demo shows a closed previous month with a bill for every demo project, and is idempotent."""

from decimal import Decimal

import pytest
from django.core.management import call_command

from apps.accounts.models import Project
from apps.billing import services
from apps.billing.models import Bill, BillingPeriod, UsageEntry
from apps.scheduling.invariants import allocation_capacity_violations

pytestmark = pytest.mark.django_db


def test_load_demo_closes_last_month_with_a_bill_for_every_project(capsys):
    call_command("load_demo")
    assert "billing:" in capsys.readouterr().out
    month = services.previous_month(services.current_month())
    period = BillingPeriod.objects.get(month=month)
    assert period.state == "closed"
    bills = Bill.objects.filter(period=period)
    assert set(bills.values_list("project__slug", flat=True)) == set(
        Project.objects.values_list("slug", flat=True)
    )
    # The demo's history never double-books a card (its finalized bills only charge possible usage).
    assert allocation_capacity_violations() == []
    for bill in bills:
        assert bill.state == "finalized" and bill.total > Decimal(0) and bill.used_cu_hours > 0
        assert sum(line.amount for line in bill.lines.filter(group="resource")) == bill.usage_amount
    counts = (UsageEntry.objects.filter(month=month).count(), Bill.objects.count())
    call_command("load_demo")
    assert (UsageEntry.objects.filter(month=month).count(), Bill.objects.count()) == counts
