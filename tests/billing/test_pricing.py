"""Issue 27 §8: the price after a project's discount has one function and one rounding rule, so a bill's
lines, the submit page's preview and the per-job costs agree to the cent — on amounts exactly half a cent
apart, where the old roundings (half-even to the cent in the preview and the job costs, half-up in the
bill) differed."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from apps.billing import selectors, services
from apps.billing.models import Bill
from apps.billing.pricing import cu_hours_of, discounted_amount, to_cents
from apps.billing.providers import job_cost_per_hour, price_per_cu_hour
from tests.fixtures.billing import local

SEP = date(2026, 9, 1)


@pytest.mark.parametrize(
    "milli, price, discount, cents",
    [
        (1000, "2.5000", "15", "2.13"),  # 1 CU × 2.50 × 85 % = 2.125
        (500, "2.2500", "0", "1.13"),  # 0.5 CU × 2.25 = 1.125
        (1000, "0.0050", "0", "0.01"),  # half a cent
        (1000, "0.0125", "60", "0.01"),  # 0.0125 × 40 % = 0.005: half a cent after the discount
    ],
)
def test_bill_lines_preview_and_job_costs_agree_to_the_cent(
    make_project, devices, make_job, make_allocation, staff_user, milli, price, discount, cents
):
    project = make_project("vision")
    card = services.rate_card_create(
        actor="test", name="default", price_per_cu_hour=Decimal(price), effective_from=date(2024, 1, 1)
    )
    if Decimal(discount):
        services.rate_card_discount_set(card=card, project=project, percent=Decimal(discount), actor="test")
    job = make_job(project)
    allocation = make_allocation(job, devices[0], local(2026, 9, 2, 10), local(2026, 9, 2, 11), milli=milli)
    expected = Decimal(cents)

    preview = job_cost_per_hour(job, allocation.compute_units)
    period = services.month_close(month=SEP, actor="test")
    bill = Bill.objects.get(project=project, period=period)
    job_line = bill.lines.get(group="job", job=job)
    resource_line = bill.lines.get(group="resource")
    (cost,) = selectors.cost_by_job(user=staff_user, month=SEP)
    (month_row,) = selectors.cost_by_month(user=staff_user)

    assert preview == f"{expected} CNY"
    assert job_line.amount == resource_line.amount == bill.usage_amount == expected
    assert cost["amount"] == expected and month_row["amount"] == expected
    # The library's price per CU-hour is the same function at the ledger's 6 places.
    net, currency = price_per_cu_hour(template_id=None, device_model_id=None, project_id=project.pk)
    assert currency == "CNY"
    assert to_cents(net * allocation.compute_units) == expected


def test_the_rule_is_half_up_at_six_places_then_half_up_to_the_cent():
    assert discounted_amount(
        cu_hours=Decimal("1"), price=Decimal("2.5"), discount_percent=Decimal("15")
    ) == Decimal("2.125000")
    assert discounted_amount(cu_hours=Decimal("0.0000005"), price=Decimal(1), discount_percent=0) == Decimal(
        "0.000001"
    )
    assert cu_hours_of(Decimal("0.3330"), Decimal("0.0000015")) == Decimal("0.000000")
    assert cu_hours_of(Decimal("0.5"), Decimal("0.000001")) == Decimal("0.000001")
    assert to_cents(Decimal("2.125")) == Decimal("2.13") and to_cents(Decimal("-2.125")) == Decimal("-2.13")
