"""Metering, month close, immutability and adjustments on real PostgreSQL."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from apps.billing import services
from apps.billing.models import (
    Adjustment,
    Bill,
    BillFinalized,
    BillingPeriod,
    BillLine,
    LedgerAppendOnly,
    RateCard,
    UsageEntry,
)
from apps.core.errors import Conflict, ValidationFailed
from apps.core.models import ChangeRecord
from tests.fixtures.billing import local

SEP = date(2026, 9, 1)
OCT = date(2026, 10, 1)


@pytest.fixture
def project(make_project):
    return make_project("vision")


@pytest.fixture
def flat_rate(db):
    return services.rate_card_create(
        actor="test", name="default", price_per_cu_hour=Decimal("10.0000"), effective_from=date(2026, 1, 1)
    )


def test_slices_split_at_the_month_boundary_in_the_platform_time_zone(
    project, devices, make_job, make_allocation, flat_rate
):
    job = make_job(project)
    # 22:30 on 30 September to 01:15 on 1 October, Shanghai time (UTC 14:30 → 17:15 on the 30th).
    make_allocation(job, devices[0], local(2026, 9, 30, 22, 30), local(2026, 10, 1, 1, 15))
    result = services.metering_run(start=local(2026, 9, 30), end=local(2026, 10, 2))
    assert result.created == 4
    entries = list(UsageEntry.objects.order_by("slice_start"))
    assert [e.hours for e in entries] == [Decimal("0.5"), Decimal("1"), Decimal("1"), Decimal("0.25")]
    assert [e.month for e in entries] == [SEP, SEP, OCT, OCT]
    assert entries[1].slice_end == local(2026, 10, 1, 0, 0)
    by_month = {m: sum(e.cu_hours for e in entries if e.month == m) for m in (SEP, OCT)}
    assert by_month == {SEP: Decimal("1.5"), OCT: Decimal("1.25")}
    assert sum(e.amount for e in entries) == Decimal("27.5")


def test_a_rate_change_in_the_middle_of_a_month_prices_each_slice_by_its_own_day(
    project, devices, make_job, make_allocation
):
    services.rate_card_create(
        actor="test",
        name="September A",
        price_per_cu_hour=Decimal("2"),
        effective_from=date(2026, 9, 1),
        effective_to=date(2026, 9, 15),
    )
    services.rate_card_create(
        actor="test", name="September B", price_per_cu_hour=Decimal("3"), effective_from=date(2026, 9, 16)
    )
    job = make_job(project)
    make_allocation(job, devices[0], local(2026, 9, 15, 23, 0), local(2026, 9, 16, 1, 0))
    services.metering_run(start=local(2026, 9, 15), end=local(2026, 9, 17))
    prices = list(UsageEntry.objects.order_by("slice_start").values_list("unit_price", "amount"))
    assert (
        prices
        == [(Decimal("2"), Decimal("2")), (Decimal("3"), Decimal("3")), (Decimal("3"), Decimal("3"))][
            : len(prices)
        ]
    )
    assert len(prices) == 2


def test_the_most_specific_rate_card_wins_and_a_project_discount_applies(
    project, devices, a100, ascend, make_job, make_allocation, flat_rate
):
    model_card = services.rate_card_create(
        actor="test",
        name="A100",
        scope="device_model",
        device_model=a100,
        price_per_cu_hour=Decimal("20"),
        effective_from=date(2026, 1, 1),
    )
    services.rate_card_discount_set(card=model_card, project=project, percent=Decimal("25"), actor="test")
    job = make_job(project)
    make_allocation(job, devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 1))  # A100: 1 CU
    make_allocation(
        job, devices[4], local(2026, 9, 1, 0), local(2026, 9, 1, 1)
    )  # Ascend: 0.8 CU, default card
    services.metering_run(start=local(2026, 9, 1), end=local(2026, 9, 2))
    amounts = dict(UsageEntry.objects.values_list("device_model__name", "amount"))
    assert amounts == {"A100 80GB SXM4": Decimal("15"), "Ascend 910B3": Decimal("8")}


def test_re_metering_the_same_window_writes_nothing_new(
    project, devices, make_job, make_allocation, flat_rate
):
    job = make_job(project)
    make_allocation(job, devices[0], local(2026, 9, 3, 8, 20), local(2026, 9, 3, 12, 5))
    first = services.metering_run(start=local(2026, 9, 3), end=local(2026, 9, 4))
    again = services.metering_run(start=local(2026, 9, 3), end=local(2026, 9, 4))
    wider = services.metering_run(start=local(2026, 9, 1), end=local(2026, 9, 30))
    assert (first.created, again.created, wider.created) == (5, 0, 0)
    assert again.slices == 5
    assert UsageEntry.objects.count() == 5
    assert sum(UsageEntry.objects.values_list("hours", flat=True)) == Decimal("3.75")


def test_an_active_allocation_is_metered_only_to_the_last_full_hour(
    project, devices, make_job, make_allocation, flat_rate
):
    job = make_job(project)
    make_allocation(job, devices[0], local(2026, 9, 5, 10, 0), None)
    result = services.metering_run(start=local(2026, 9, 5), now=local(2026, 9, 5, 13, 40))
    assert result.window_end == local(2026, 9, 5, 13, 0)
    assert UsageEntry.objects.count() == 3
    # Later runs continue where the earlier stopped, without duplicates.
    services.metering_run(start=local(2026, 9, 5), now=local(2026, 9, 5, 15, 1))
    assert UsageEntry.objects.count() == 5


def test_late_data_for_a_closed_month_goes_into_the_open_month(
    project, devices, make_job, make_allocation, flat_rate
):
    job = make_job(project)
    make_allocation(job, devices[0], local(2026, 9, 10, 0), local(2026, 9, 10, 2))
    services.month_close(month=SEP, actor="test")
    september_bill = Bill.objects.get(project=project, month=SEP)
    assert september_bill.used_cu_hours == Decimal("2")
    # An allocation of September that reached the database after the close:
    make_allocation(job, devices[1], local(2026, 9, 20, 0), local(2026, 9, 20, 1))
    result = services.metering_run(start=local(2026, 9, 1), end=local(2026, 10, 1))
    assert result.created == 1 and result.late == 1
    late = UsageEntry.objects.get(allocation__device=devices[1])
    assert (late.month, late.late, late.slice_start) == (OCT, True, local(2026, 9, 20, 0))
    september_bill.refresh_from_db()
    assert september_bill.used_cu_hours == Decimal("2")
    services.month_close(month=OCT, actor="test")
    assert Bill.objects.get(project=project, month=OCT).used_cu_hours == Decimal("1")


def _assert_adds_up(bill: Bill) -> None:
    lines = list(bill.lines.all())
    for group in (BillLine.Group.RESOURCE, BillLine.Group.JOB):
        members = [line.amount for line in lines if line.group == group]
        if bill.usage_amount:
            assert sum(members, Decimal(0)) == bill.usage_amount
    adjustments = sum((line.amount for line in lines if line.group == BillLine.Group.ADJUSTMENT), Decimal(0))
    idle = sum((line.amount for line in lines if line.group == BillLine.Group.IDLE), Decimal(0))
    assert adjustments == bill.adjustments_amount and idle == bill.idle_share_amount
    assert bill.total == bill.usage_amount + bill.adjustments_amount + bill.idle_share_amount
    for line in lines:
        assert line.amount == line.amount.quantize(Decimal("0.01"))


def test_lines_add_up_to_the_total_to_the_cent(project, devices, a100, make_job, make_allocation):
    # A price and shares that leave sub-cent remainders everywhere.
    services.rate_card_create(
        actor="test", name="odd", price_per_cu_hour=Decimal("3.3333"), effective_from=date(2026, 1, 1)
    )
    jobs = [make_job(project, name=f"job-{i}") for i in range(3)]
    minutes = [7, 13, 29]
    for i, job in enumerate(jobs):
        make_allocation(
            job,
            devices[i],
            local(2026, 9, 2, 10, minutes[i]),
            local(2026, 9, 2, 13, 59 - minutes[i]),
            milli=333,
        )
        make_allocation(job, devices[4 + i], local(2026, 9, 2, 1, 1), local(2026, 9, 2, 1, 50), milli=1000)
    period = services.month_close(month=SEP, actor="test")
    bill = Bill.objects.get(project=project, period=period)
    raw = sum(UsageEntry.objects.filter(month=SEP).values_list("amount", flat=True))
    assert bill.usage_amount == services.to_cents(raw)
    assert bill.lines.filter(group="job").count() == 3
    assert bill.lines.filter(group="resource").count() == 2
    _assert_adds_up(bill)


def test_allocate_cents_is_exact_and_deterministic():
    raw = [Decimal("1.005"), Decimal("1.005"), Decimal("1.005")]
    assert services.allocate_cents(raw, Decimal("3.02")) == [
        Decimal("1.01"),
        Decimal("1.01"),
        Decimal("1.00"),
    ]
    assert services.allocate_cents([Decimal(1)] * 3, Decimal("1.00")) == [
        Decimal("0.34"),
        Decimal("0.33"),
        Decimal("0.33"),
    ]
    assert sum(services.allocate_cents([Decimal("-0.333")] * 3, Decimal("-1.00"))) == Decimal("-1.00")
    assert services.allocate_cents([Decimal(0), Decimal(0)], Decimal("0.05")) == [Decimal("0.05"), Decimal(0)]


def test_closing_gives_every_active_project_a_finalized_bill(
    make_project, project, devices, make_job, make_allocation, flat_rate
):
    idle = make_project("idle-project")
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    period = services.month_close(month=SEP, actor="test")
    assert period.state == "closed" and period.progress_percent == 100
    bills = {b.project.slug: b for b in Bill.objects.filter(period=period).select_related("project")}
    assert set(bills) == {"vision", "idle-project"}
    assert bills["vision"].total == Decimal("30.00")
    assert bills["vision"].guaranteed_cu_hours is None  # the project has no quota
    assert bills["idle-project"].total == Decimal("0") and bills["idle-project"].state == "finalized"
    assert idle.pk == bills["idle-project"].project_id
    assert ChangeRecord.objects.filter(action="billing.month_close", object_id=str(period.pk)).exists()


def test_closing_a_closed_month_again_changes_nothing(project, devices, make_job, make_allocation, flat_rate):
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    first = services.month_close(month=SEP, actor="test")
    snapshot_before = list(Bill.objects.values_list("pk", "total", "state", "finalized_at"))
    lines_before = list(BillLine.objects.values_list("pk", "amount"))
    again = services.month_close(month=SEP, actor="test")
    assert again.pk == first.pk and again.closed_at == first.closed_at
    assert list(Bill.objects.values_list("pk", "total", "state", "finalized_at")) == snapshot_before
    assert list(BillLine.objects.values_list("pk", "amount")) == lines_before
    assert ChangeRecord.objects.filter(action="billing.month_close").count() == 1


def test_closing_a_month_that_has_not_ended_is_refused(project):
    with pytest.raises(ValidationFailed) as err:
        services.month_close(month=services.current_month(), actor="test")
    assert err.value.code == "month_not_ended"
    assert not BillingPeriod.objects.exists() and not Bill.objects.exists()


def test_a_draft_close_can_be_rebuilt_then_finalized(project, devices, make_job, make_allocation, flat_rate):
    job = make_job(project)
    make_allocation(job, devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 1))
    period = services.month_close(month=SEP, actor="test", finalize=False)
    assert period.state == "draft"
    draft = Bill.objects.get(period=period)
    assert draft.total == Decimal("10.00")
    make_allocation(job, devices[1], local(2026, 9, 2, 0), local(2026, 9, 2, 1))
    period = services.month_close(month=SEP, actor="test", finalize=False)
    rebuilt = Bill.objects.get(period=period)
    assert rebuilt.total == Decimal("20.00") and not Bill.objects.filter(pk=draft.pk).exists()
    services.bill_finalize(bill=rebuilt, actor="test")
    period.refresh_from_db()
    assert period.state == "closed"
    with pytest.raises(BillFinalized):
        services.bill_finalize(bill=rebuilt, actor="test")


@pytest.fixture
def finalized_bill(project, devices, make_job, make_allocation, flat_rate):
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 2))
    services.month_close(month=SEP, actor="test")
    return Bill.objects.get(project=project, month=SEP)


def test_a_finalized_bill_refuses_save_and_delete(finalized_bill):
    finalized_bill.total = Decimal("0.01")
    with pytest.raises(BillFinalized):
        finalized_bill.save()
    with pytest.raises(BillFinalized):
        finalized_bill.delete()
    line = finalized_bill.lines.first()
    line.amount = Decimal("1.00")
    with pytest.raises(BillFinalized):
        line.save()
    with pytest.raises(BillFinalized):
        services.bill_update(bill=finalized_bill, actor="test", total=Decimal(1))
    assert Bill.objects.get(pk=finalized_bill.pk).total == Decimal("20.00")


def test_the_database_refuses_to_change_a_finalized_bill_below_the_orm(finalized_bill):
    with pytest.raises(IntegrityError), transaction.atomic():
        Bill.objects.filter(pk=finalized_bill.pk).update(state="draft")
    with pytest.raises(IntegrityError), transaction.atomic():
        BillLine.objects.filter(bill=finalized_bill).update(amount=Decimal("0"))
    with pytest.raises(IntegrityError), transaction.atomic():
        BillLine.objects.filter(bill=finalized_bill).delete()
    with pytest.raises(IntegrityError), transaction.atomic():
        BillLine.objects.bulk_create(
            [BillLine(bill_id=finalized_bill.pk, group="job", label="sneaky", amount=Decimal("1"))]
        )
    with pytest.raises(IntegrityError), transaction.atomic():
        Bill.objects.filter(pk=finalized_bill.pk).delete()
    finalized_bill.refresh_from_db()
    assert (finalized_bill.state, finalized_bill.total) == ("finalized", Decimal("20.00"))


def test_the_usage_ledger_is_append_only(finalized_bill):
    entry = UsageEntry.objects.first()
    with pytest.raises(LedgerAppendOnly):
        entry.save()
    with pytest.raises(LedgerAppendOnly):
        entry.delete()
    with pytest.raises(IntegrityError), transaction.atomic():
        UsageEntry.objects.filter(pk=entry.pk).update(amount=Decimal("0"))
    with pytest.raises(IntegrityError), transaction.atomic():
        UsageEntry.objects.filter(pk=entry.pk).delete()
    assert UsageEntry.objects.get(pk=entry.pk).amount == Decimal("10")


def test_an_adjustment_lands_in_the_next_open_month_and_on_its_bill(finalized_bill, project, staff_user):
    adjustment = services.adjustment_create(
        project=project,
        amount=Decimal("-5.25"),
        reason="card 3 was lost for two hours",
        actor=staff_user,
        corrects_bill=finalized_bill,
    )
    assert adjustment.month == OCT and adjustment.actor == staff_user
    assert ChangeRecord.objects.filter(action="billing.adjustment_create", actor=staff_user).exists()
    services.month_close(month=OCT, actor="test")
    october = Bill.objects.get(project=project, month=OCT)
    assert october.adjustments_amount == Decimal("-5.25") and october.total == Decimal("-5.25")
    assert october.lines.get(group="adjustment").label == "card 3 was lost for two hours"
    finalized_bill.refresh_from_db()
    assert finalized_bill.total == Decimal("20.00")


@pytest.mark.parametrize(
    ("amount", "reason", "field"),
    [(Decimal("0"), "x", "amount"), (Decimal("1.005"), "x", "amount"), (Decimal("2"), "  ", "reason")],
)
def test_bad_adjustments_are_refused_with_nothing_written(project, amount, reason, field):
    with pytest.raises(ValidationFailed) as err:
        services.adjustment_create(project=project, amount=amount, reason=reason, actor="test")
    assert field in err.value.details
    assert not Adjustment.objects.exists()


def test_overlapping_rate_cards_of_one_scope_are_refused(flat_rate, a100):
    with pytest.raises(Conflict) as err:
        services.rate_card_create(
            actor="test", name="clash", price_per_cu_hour=Decimal("1"), effective_from=date(2026, 6, 1)
        )
    assert err.value.code == "rate_card_overlap" and "default" in err.value.message
    # Another scope, or the same scope after the first card ends, is fine.
    services.rate_card_create(
        actor="test",
        name="A100",
        scope="device_model",
        device_model=a100,
        price_per_cu_hour=Decimal("1"),
        effective_from=date(2026, 6, 1),
    )
    services.rate_card_update(card=flat_rate, actor="test", effective_to=date(2026, 5, 31))
    services.rate_card_create(
        actor="test", name="summer", price_per_cu_hour=Decimal("1"), effective_from=date(2026, 6, 1)
    )
    assert RateCard.objects.count() == 3


def test_negative_prices_and_scope_mismatches_are_refused(a100):
    with pytest.raises(ValidationFailed) as err:
        services.rate_card_create(
            actor="test", name="neg", price_per_cu_hour=Decimal("-1"), effective_from=date(2026, 1, 1)
        )
    assert err.value.message == "rate card is invalid: price_per_cu_hour: A price cannot be negative."
    assert "price_per_cu_hour" in err.value.details
    with pytest.raises(ValidationFailed) as err:
        services.rate_card_create(
            actor="test",
            name="x",
            scope="device_model",
            price_per_cu_hour=Decimal("1"),
            effective_from=date(2026, 1, 1),
        )
    assert "device_model" in err.value.details and err.value.message.startswith("rate card is invalid:")
    assert not RateCard.objects.exists()


def test_idle_cost_is_spread_over_projects_in_proportion_to_use(
    make_project, project, devices, make_job, make_allocation, flat_rate
):
    from apps.inventory.models import Device

    other = make_project("other")
    # Only the four cards of gpu-01 were in service for all of September.
    Device.objects.exclude(node__name="gpu-01").update(created_at=local(2026, 12, 1))
    Device.objects.filter(node__name="gpu-01").update(created_at=local(2026, 8, 1))
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))  # 3 CU-h
    make_allocation(make_job(other), devices[1], local(2026, 9, 1, 0), local(2026, 9, 1, 1))  # 1 CU-h
    period = services.month_close(month=SEP, actor="test", idle_policy="spread")
    capacity = Decimal(4 * 30 * 24)
    assert period.idle_cu_hours == capacity - 4
    assert period.idle_cost == (capacity - 4) * 10
    bills = {b.project.slug: b for b in period.bills.select_related("project")}
    assert bills["vision"].idle_share_amount + bills["other"].idle_share_amount == period.idle_cost
    assert bills["vision"].idle_share_amount == period.idle_cost * 3 / 4
    for bill in bills.values():
        _assert_adds_up(bill)


def test_idle_cost_charged_to_the_platform_stays_off_project_bills(
    project, devices, make_job, make_allocation, flat_rate
):
    from apps.inventory.models import Device

    Device.objects.update(created_at=local(2026, 8, 1))
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    period = services.month_close(month=SEP, actor="test", idle_policy="platform")
    assert period.platform_cost == period.idle_cost > 0
    assert Bill.objects.get(project=project).idle_share_amount == 0


def test_usage_basis_max_bills_telemetrys_measured_figure_where_it_is_higher(
    project, devices, make_job, make_allocation, flat_rate
):
    from datetime import timedelta

    from apps.telemetry.models import JobUtilization

    job = make_job(project)
    # Half an A100 (coefficient 1.0): 0.5 CU allocated for three hours.
    allocation = make_allocation(job, devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3), milli=500)
    assert allocation.compute_units == Decimal("0.5000")
    # Telemetry attributed 80 busy points in the first hour (0.8 CU-h > 0.5), 30 in the second
    # (0.3 < 0.5) and nothing in the third.
    for hour, busy in ((0, 80.0), (1, 30.0)):
        for i in range(12):
            JobUtilization.objects.create(
                job=job,
                device=devices[0],
                window_start=local(2026, 9, 1, hour) + timedelta(minutes=5 * i),
                source="prom:a",
                quality="exact",
                share=0.5,
                busy_pct=busy,
                project_id_snapshot=project.pk,
            )
    services.metering_run(start=local(2026, 9, 1), end=local(2026, 9, 2), basis="max")
    entries = [(e.basis, e.cu_hours, e.amount) for e in UsageEntry.objects.order_by("slice_start")]
    assert entries == [
        ("max", Decimal("0.8"), Decimal("8")),
        ("allocated", Decimal("0.5"), Decimal("5")),
        ("allocated", Decimal("0.5"), Decimal("5")),
    ]


def test_the_projects_quota_fills_the_guaranteed_cu_hours_showback(
    project, devices, make_job, make_allocation, flat_rate
):
    from apps.quotas.models import Quota

    quota = Quota.objects.create(project=project, resource_class="any", guaranteed_cu=Decimal("2"))
    Quota.objects.filter(pk=quota.pk).update(created_at=local(2026, 8, 15))
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 2))
    services.month_close(month=SEP, actor="test")
    bill = Bill.objects.get(project=project)
    # September has 30 days: 2 CU guaranteed × 720 hours.
    assert (bill.guaranteed_cu_hours, bill.used_cu_hours) == (Decimal("1440"), Decimal("2"))


def test_metering_and_closing_exclude_each_other(project, devices, make_job, make_allocation, flat_rate):
    from worker.tasks.billing import LedgerBusy, metering_task, month_close_task

    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 2))
    with services.ledger_lock("test") as taken:
        assert taken
        assert "skipped" in metering_task.run()
        with pytest.raises(Conflict) as err:
            services.month_close(month=SEP, actor="test")
        assert err.value.code == "ledger_busy"
        period = services.month_close_start(month=SEP, actor="test")
        with pytest.raises(LedgerBusy):
            month_close_task.run(period.pk)
    assert BillingPeriod.objects.get(month=SEP).state == "closing" and not Bill.objects.exists()
    month_close_task.run(period.pk)
    assert BillingPeriod.objects.get(month=SEP).state == "closed" and Bill.objects.count() == 1


def test_a_month_close_is_one_background_run_and_a_restarted_close_supersedes_the_stopped_one(
    project, devices, make_job, make_allocation, flat_rate
):
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 3))
    first = services.month_close_start(month=SEP, actor="test").close_run
    assert (first.kind, first.status, first.progress_message) == ("billing.month_close", "queued", "metering")
    # The worker that had it died; an operator starts the close again.
    period = services.month_close_start(month=SEP, actor="command:close_month")
    first.refresh_from_db()
    assert first.status == "failed" and "superseded" in first.error
    second = period.close_run
    assert second.pk != first.pk and second.status == "queued"
    period = services.month_close_run(period=period, actor="command:close_month")
    second.refresh_from_db()
    assert period.state == "closed" and second.status == "succeeded" and second.finished_at
    assert (second.progress_done, second.progress_total) == (1, 1) and second.result["state"] == "closed"
    assert (period.progress_done, period.progress_total, period.progress_percent) == (1, 1, 100)
