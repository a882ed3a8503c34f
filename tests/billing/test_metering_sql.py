"""Metering in SQL (issue 31 §3) gives every entry slice-by-slice metering in Python gives, cent for
cent; the SQL forms of the rounding rules are the Python rules; a run that fails writes nothing."""

from __future__ import annotations

import random
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction

from apps.billing import services
from apps.billing.models import BillingPeriod, UsageEntry
from apps.billing.pricing import (
    cu_hours_of,
    cu_hours_sql,
    discounted_amount,
    discounted_amount_sql,
    hours_sql,
    positive_hours_sql,
    slice_hours_sql,
)
from apps.billing.services import metering
from apps.billing.services.months import _hours
from apps.telemetry.models import JobUtilization
from tests.fixtures.billing import local

pytestmark = pytest.mark.django_db
AUG, SEP, OCT = date(2026, 8, 1), date(2026, 9, 1), date(2026, 10, 1)
FIELDS = [c for c in services.ENTRY_COLUMNS if c != "metered_at"]


def test_the_sql_forms_of_the_rounding_rules_give_the_python_figures():
    rng = random.Random(31)
    # Ties at the 7th place (half-up), and random figures.
    micros = [1800, 5400, 3_598_200, 3_600_000_000, 1] + [rng.randrange(1, 3_600_000_001) for _ in range(300)]
    units = [Decimal("0.0005"), Decimal("0.3330"), Decimal("1.0000")]
    units += [Decimal(rng.randrange(1, 80000)) / 10000 for _ in range(300)]
    prices = [Decimal("0.0005"), Decimal("12.3456")] + [
        Decimal(rng.randrange(1, 10**7)) / 10000 for _ in range(300)
    ]
    discounts = [Decimal("12.5"), Decimal("0"), Decimal("33.33")] + [
        Decimal(rng.randrange(0, 10001)) / 100 for _ in range(300)
    ]
    base = local(2026, 9, 1)
    rows = []
    for i, micro in enumerate(micros):
        hours = _hours(timedelta(microseconds=micro))
        cu = cu_hours_of(units[i % len(units)], hours)
        price, discount = prices[i % len(prices)], discounts[i % len(discounts)]
        rows.append((micro, units[i % len(units)], hours, cu, price, discount))
    slice_hours = hours_sql("%(base)s::timestamptz", "%(base)s::timestamptz + m * interval '1 microsecond'")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {slice_hours}, "  # noqa: S608 - constant fragments
            f"{cu_hours_sql('u', 'h')}, {discounted_amount_sql('c', 'p', 'd')} "
            "FROM unnest(%(m)s::bigint[], %(u)s::numeric[], %(h)s::numeric[], %(c)s::numeric[], "
            "%(p)s::numeric[], %(d)s::numeric[]) WITH ORDINALITY AS v(m, u, h, c, p, d, n) ORDER BY n",
            {"base": base, **{k: [r[i] for r in rows] for i, k in enumerate("muhcpd")}},
        )
        got = cursor.fetchall()
    want = [
        (hours, cu, discounted_amount(cu_hours=cu, price=price, discount_percent=discount))
        for _m, _u, hours, cu, price, discount in rows
    ]
    assert got == want
    assert got[0][0] == Decimal("0.000001") and got[2][0] == Decimal("0.001000")  # ties, half-up


def test_positive_hours_sql_is_hours_sql_above_zero():
    micros = [0, 1, 1799, 1800, 1801, 3599, 3600, 5399, 5400, 3_600_000_000]
    span = ("%(base)s::timestamptz", "%(base)s::timestamptz + m * interval '1 microsecond'")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT m, {hours_sql(*span)} > 0, {positive_hours_sql(*span)} "  # noqa: S608 - constant fragments
            "FROM unnest(%(m)s::bigint[]) AS v(m) ORDER BY m",
            {"base": local(2026, 9, 1), "m": micros},
        )
        got = cursor.fetchall()
    assert [(m, positive) for m, positive, _fast in got] == [(m, m >= 1800) for m in micros]
    assert all(positive == fast for _m, positive, fast in got)
    assert [(m, _hours(timedelta(microseconds=m)) > 0) for m in micros] == [(m, m >= 1800) for m in micros]


def test_slice_hours_sql_is_hours_sql_of_the_clipped_hour():
    # (lo, hi) offsets from the hour in microseconds: whole hour, longer span, clipped at either end or
    # both, a sub-half-millionth sliver, a span ending exactly at the hour's end
    hour_us = 3_600_000_000
    spans = [(0, hour_us), (-5, hour_us + 7), (1, hour_us), (0, hour_us - 1), (1800, 900_000), (-9, 1799)]
    spans += [(-hour_us, hour_us), (17, hour_us + 1)]
    base = local(2026, 9, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {slice_hours_sql('%(base)s::timestamptz', 'v.lo', 'v.hi')} "  # noqa: S608 - constant fragments
            "FROM (SELECT %(base)s::timestamptz + a * interval '1 microsecond' AS lo, "
            "%(base)s::timestamptz + b * interval '1 microsecond' AS hi, n "
            "FROM unnest(%(a)s::bigint[], %(b)s::bigint[]) WITH ORDINALITY AS u(a, b, n)) v ORDER BY n",
            {"base": base, "a": [a for a, _b in spans], "b": [b for _a, b in spans]},
        )
        got = [row[0] for row in cursor.fetchall()]
    want = [_hours(timedelta(microseconds=min(b, hour_us) - max(a, 0))) for a, b in spans]
    assert got == want
    assert got[0] == got[1] == Decimal("1.000000") and got[4] == Decimal("0.000250")


def _snapshot() -> list[tuple]:
    return list(UsageEntry.objects.order_by("allocation_id", "slice_start").values_list(*FIELDS))


def _windows(job, device, project, *, start, hours: int, busy: float, source: str = "prom:a") -> None:
    JobUtilization.objects.bulk_create(
        JobUtilization(
            job=job,
            device=device,
            window_start=start + timedelta(minutes=5 * i),
            source=source,
            quality="exact",
            share=0.5,
            busy_pct=busy + i % 3 * 0.37,
            project_id_snapshot=project.pk,
        )
        for i in range(12 * hours)
    )


@pytest.fixture
def mixed_month(make_project, devices, a100, ascend, half_a100, make_job, make_allocation):
    """Cards, slices and a template job; a price change, a discount, model/pool/template/default cards;
    telemetry above and below the allocated figure from two sources; August closed (late data)."""
    services.rate_card_create(
        actor="t", name="default", price_per_cu_hour=Decimal("7.7777"), effective_from=date(2026, 1, 1)
    )
    a100_sep = services.rate_card_create(
        actor="t", name="A100 a", scope="device_model", device_model=a100,
        price_per_cu_hour=Decimal("20.1234"), effective_from=date(2026, 1, 1), effective_to=date(2026, 9, 15),
    )  # fmt: skip
    services.rate_card_create(
        actor="t", name="A100 b", scope="device_model", device_model=a100,
        price_per_cu_hour=Decimal("22.5"), effective_from=date(2026, 9, 16),
    )  # fmt: skip
    services.rate_card_create(
        actor="t", name="pool", scope="pool", pool=devices[4].node.pool,
        price_per_cu_hour=Decimal("3.3333"), effective_from=date(2026, 9, 10),
    )  # fmt: skip
    services.rate_card_create(
        actor="t", name="half", scope="template", template=half_a100,
        price_per_cu_hour=Decimal("31.4159"), effective_from=date(2026, 1, 1),
    )  # fmt: skip
    vision, other = make_project("vision"), make_project("other")
    services.rate_card_discount_set(card=a100_sep, project=vision, percent=Decimal("12.5"), actor="t")
    BillingPeriod.objects.create(month=AUG, state=BillingPeriod.State.CLOSED)
    job, job2, tjob = make_job(vision), make_job(other), make_job(vision, template=half_a100)
    make_allocation(job, devices[0], local(2026, 8, 31, 22, 30), local(2026, 9, 1, 1, 15))  # late + Sep
    make_allocation(job, devices[1], local(2026, 9, 15, 22, 7, 13), local(2026, 9, 16, 2, 0, 1))
    make_allocation(job2, devices[1], local(2026, 9, 16, 3), local(2026, 9, 16, 3, 0, 0, 1000))  # 0.001 s
    make_allocation(job2, devices[2], local(2026, 9, 29, 23, 59, 59), None)  # open: to the window's end
    make_allocation(
        job2, devices[4], local(2026, 9, 9, 20), local(2026, 9, 10, 4, 20)
    )  # pool card from the 10th
    make_allocation(job, devices[5], local(2026, 9, 3, 1), local(2026, 9, 3, 2), milli=333)
    half = make_allocation(job, devices[3], local(2026, 9, 20, 10, 3), local(2026, 9, 20, 14), milli=500)
    _windows(job, devices[3], vision, start=local(2026, 9, 20, 10, 5), hours=1, busy=80.0)  # 0.8 > 0.5
    _windows(job, devices[3], vision, start=local(2026, 9, 20, 10, 5), hours=1, busy=99.0, source="prom:z")
    _windows(job, devices[3], vision, start=local(2026, 9, 20, 12, 5), hours=1, busy=30.0)  # 0.3 < 0.5
    odd = make_allocation(tjob, devices[3], local(2026, 9, 21, 0), local(2026, 9, 21, 3, 10), milli=500)
    _windows(tjob, devices[3], vision, start=local(2026, 9, 21, 0), hours=3, busy=50.0)  # ≈ the allocated
    make_allocation(job, devices[5], local(2026, 9, 22, 5), local(2026, 9, 22, 6), milli=333, units="0.3331")
    _windows(job, devices[5], vision, start=local(2026, 9, 22, 5), hours=1, busy=33.4)
    return half, odd


def _runs():
    now = local(2026, 9, 30, 12, 30)
    return [
        services.metering_run(start=local(2026, 9, 20), end=local(2026, 9, 21), basis="max", now=now),
        services.metering_run(start=local(2026, 8, 25), end=local(2026, 10, 1), basis="max", now=now),
        services.metering_run(start=local(2026, 8, 25), end=local(2026, 10, 1), basis="max", now=now),
    ]


@pytest.mark.parametrize("probe", [False, True], ids=["hash-join", "index-probes"])
def test_metering_in_sql_writes_the_entries_metering_in_python_writes(mixed_month, monkeypatch, probe):
    # Telemetry's rollups read by one hash join (a month at once) or by index probes (hourly runs).
    monkeypatch.setattr(metering, "PROBE_ROLLUPS_PER_ALLOCATION", -1 if probe else 10**9)
    with transaction.atomic():
        with monkeypatch.context() as patch:
            patch.setattr(metering, "_meter_in_sql", metering._meter_in_python)
            in_python = [r.as_dict() for r in _runs()]
        expected = _snapshot()
        transaction.set_rollback(True)
    assert UsageEntry.objects.count() == 0
    in_sql = [r.as_dict() for r in _runs()]
    assert _snapshot() == expected
    assert in_sql == in_python
    assert [r["created"] for r in in_sql][2] == 0 and len(expected) == sum(r["created"] for r in in_sql)
    # The fixture reaches every rule: late data, both bases, every scope, the discount, partial hours.
    bases = {e[FIELDS.index("basis")] for e in expected}
    prices = {e[FIELDS.index("unit_price")] for e in expected}
    assert bases == {"max", "allocated"} and in_sql[1]["late"] == 2
    assert prices == {Decimal(p) for p in ("7.7777", "20.1234", "22.5", "3.3333", "31.4159")}
    assert Decimal("12.5") in {e[FIELDS.index("discount_percent")] for e in expected}
    assert Decimal("0.000278") in {e[FIELDS.index("hours")] for e in expected}


def test_a_run_that_fails_midway_leaves_no_entry(mixed_month, monkeypatch):
    def broken(months):
        raise RuntimeError("worker killed")

    with monkeypatch.context() as patch:
        patch.setattr(metering, "_ensure_periods", broken)
        with pytest.raises(RuntimeError):
            _runs()
    assert UsageEntry.objects.count() == 0
    assert sum(r.created for r in _runs()) == UsageEntry.objects.count() == 41
