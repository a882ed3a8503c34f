"""Vendor shares of compute-unit-hours per month reconcile with the billing ledger to the cent."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from apps.billing import services as billing
from apps.billing.models import RateCard, UsageEntry
from apps.migration import selectors
from tests.fixtures.billing import local

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(fleet, make_project, make_user, make_job, make_allocation, staff_user, a100, ascend):
    """Two projects, A100 and Ascend cards, odd minutes and prices so every entry has sub-cent parts."""
    from apps.inventory.models import Device

    member = make_user("mia")
    mine = make_project("serving", members=[member])
    other = make_project("research")
    billing.rate_card_create(
        actor=staff_user,
        name="default",
        price_per_cu_hour=Decimal("12.3457"),
        effective_from=date(2026, 1, 1),
    )
    billing.rate_card_create(
        actor=staff_user,
        name="ascend",
        scope=RateCard.Scope.DEVICE_MODEL,
        device_model=ascend,
        price_per_cu_hour=Decimal("9.8761"),
        effective_from=date(2026, 1, 1),
    )
    gpus = list(Device.objects.filter(node__name="gpu-01").order_by("index"))
    npus = list(Device.objects.filter(node__name="npu-01").order_by("index"))
    plan = [
        (mine, gpus[0], local(2026, 9, 3, 8, 7), local(2026, 9, 3, 19, 41), 1000),
        (mine, npus[0], local(2026, 9, 4, 0, 13), local(2026, 9, 5, 2, 59), 1000),
        (mine, npus[1], local(2026, 9, 30, 21, 17), local(2026, 10, 1, 5, 3), 500),  # crosses the month
        (other, gpus[1], local(2026, 9, 10, 9, 1), local(2026, 9, 10, 23, 23), 300),
        (other, npus[2], local(2026, 10, 2, 1, 0), local(2026, 10, 2, 7, 29), 1000),
    ]
    for i, (project, device, start, end, milli) in enumerate(plan):
        job = make_job(project, name=f"job{i}")
        make_allocation(job, device, start, end, milli=milli)
    billing.metering_run(start=local(2026, 9, 1), end=local(2026, 10, 3), now=local(2026, 10, 3))
    return member, mine, other


def test_vendor_amounts_add_up_to_the_ledger_total_to_the_cent(ledger, staff_user):
    months = selectors.vendor_share_by_month(user=staff_user, months=3, today=date(2026, 10, 15))
    assert [m["month"] for m in months] == [date(2026, 9, 1), date(2026, 10, 1)]
    for month in months:
        entries = UsageEntry.objects.filter(month=month["month"])
        raw = entries.aggregate(t=Sum("amount"), cu=Sum("cu_hours"))
        assert raw["t"] != raw["t"].quantize(Decimal("0.01"))  # sub-cent parts: rounding is exercised
        total = billing.to_cents(raw["t"])
        assert month["amount"] == total
        assert sum(v["amount"] for v in month["vendors"]) == total
        assert sum(v["cu_hours"] for v in month["vendors"]) == raw["cu"]
        for v in month["vendors"]:
            exact = entries.filter(allocation__device__vendor=v["vendor"]).aggregate(t=Sum("amount"))["t"]
            assert abs(v["amount"] - exact) < Decimal("0.01")
    september = months[0]
    assert {v["vendor"] for v in september["vendors"]} == {"nvidia", "huawei"}
    assert sum(v["share_pct"] for v in september["vendors"]) == pytest.approx(
        Decimal(100), abs=Decimal("0.02")
    )


def test_a_member_sees_the_shares_of_their_projects_only(ledger):
    member, mine, _other = ledger
    months = selectors.vendor_share_by_month(user=member, months=3, today=date(2026, 10, 15))
    for month in months:
        own = UsageEntry.objects.filter(month=month["month"], project=mine).aggregate(t=Sum("amount"))["t"]
        assert month["amount"] == billing.to_cents(own)
        assert sum(v["amount"] for v in month["vendors"]) == billing.to_cents(own)


def test_the_api_and_the_csv_give_the_same_reconciled_figures(ledger, staff_user, api_client, client):
    api_client.force_authenticate(staff_user)
    body = api_client.get("/api/migration/dashboard/vendor-share/", {"months": 36}).json()
    september = next(m for m in body if m["month"] == "2026-09-01")
    # Staff see the whole ledger: the month's total in cents is what the vendor shares add up to.
    total = billing.to_cents(
        UsageEntry.objects.filter(month=date(2026, 9, 1)).aggregate(t=Sum("amount"))["t"]
    )
    assert Decimal(september["amount"]) == total
    assert sum(Decimal(v["amount"]) for v in september["vendors"]) == total
    client.force_login(staff_user)
    csv_text = client.get("/migration/export/vendor-share.csv").content.decode()
    rows = [line.split(",") for line in csv_text.strip().splitlines()[1:] if line.startswith("2026-09")]
    assert sum(Decimal(r[4]) for r in rows) == total
    assert api_client.get("/api/migration/dashboard/vendor-share/", {"months": 0}).status_code == 400


def test_share_months_window(ledger, staff_user):
    months = selectors.vendor_share_by_month(user=staff_user, months=1, today=date(2026, 10, 15))
    assert [m["month"] for m in months] == [date(2026, 10, 1)]
    assert (
        selectors.vendor_share_by_month(
            user=staff_user, months=1, today=date(2026, 10, 15) + timedelta(days=90)
        )
        == []
    )
