"""The job-cost page: its page and its count come from the per-job summary, never from the ledger
(issue 20, issue 31 §3), with the paginator's rules for odd page numbers, and a member sees only their
projects' jobs."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from apps.billing import views as billing_views
from apps.billing.models import BillingPeriod, UsageEntry
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.jobs.models import Allocation, Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def costs(make_project, make_user, monkeypatch):
    """Five jobs of one project (costs 1..5) and one of another project (cost 100); two rows a page."""
    monkeypatch.setattr(billing_views, "PAGE_SIZE", 2)
    alice = make_user("alice")
    mine, theirs = make_project("mine", members=[alice]), make_project("theirs")
    cluster = Cluster.objects.create(name="c", slug="c")
    node = Node.objects.create(
        cluster=cluster, pool=Pool.objects.create(cluster=cluster, name="p", slug="p"), name="n"
    )
    month = timezone.localdate().replace(day=1)
    BillingPeriod.objects.create(month=month, state=BillingPeriod.State.OPEN)
    start = dt.datetime.combine(month, dt.time(), tzinfo=dt.UTC)
    for i, (project, cost) in enumerate([(mine, c) for c in (1, 2, 3, 4, 5)] + [(theirs, 100)]):
        device = Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"GPU-{i}")
        job = Job.objects.create(
            project=project,
            name=f"cost-{cost}",
            image="x",
            state="running",
            request_kind="whole_cards",
            count=1,
        )
        allocation = Allocation.objects.create(
            job=job,
            device=device,
            node=node,
            whole_card=True,
            memory_mib=1,
            compute_milli=1000,
            compute_units=Decimal(1),
            trace_id=uuid.uuid4(),
            started_at=start,
        )
        for h in range(2):  # two slices: the page sums them
            UsageEntry.objects.create(
                project=project,
                job=job,
                allocation=allocation,
                month=month,
                slice_start=start + dt.timedelta(hours=h),
                slice_end=start + dt.timedelta(hours=h + 1),
                hours=Decimal(1),
                compute_units=Decimal(1),
                cu_hours=Decimal(1),
                unit_price=Decimal(cost),
                amount=Decimal(cost),
            )
    return {"alice": alice}


def _get(client, query: str = "") -> tuple[str, list[str]]:
    """(the page, the queries it made over the job-cost summary); it never reads the ledger."""
    seen: list[str] = []

    def keep(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        response = client.get("/billing/jobs/" + query)
    assert response.status_code == 200
    assert not [q for q in seen if '"billing_usageentry"' in q]
    summary = ('FROM "billing_jobcostsummary"', 'FROM "billing_jobcosttotal"')
    return response.content.decode(), [q for q in seen if any(table in q for table in summary)]


def _jobs(body: str) -> list[str]:
    return [
        name for name in ("cost-100", "cost-5", "cost-4", "cost-3", "cost-2", "cost-1") if f">{name}<" in body
    ]


def test_the_page_and_its_count_come_from_the_summary(client, staff_user, costs):
    client.force_login(staff_user)
    body, summary = _get(client)
    assert _jobs(body) == ["cost-100", "cost-5"] and "Page 1 of 3" in body and "200.00" in body
    assert len(summary) == 2, summary  # the page, the count
    body, summary = _get(client, "?page=3")
    assert _jobs(body) == ["cost-2", "cost-1"] and "Page 3 of 3" in body and 'rel="next"' not in body
    assert len(summary) == 2


@pytest.mark.parametrize(
    ("page", "shown", "label"),
    [
        ("abc", ["cost-100", "cost-5"], "Page 1 of 3"),
        ("9", ["cost-2", "cost-1"], "Page 3 of 3"),
        ("0", ["cost-2", "cost-1"], "Page 3 of 3"),
        ("-2", ["cost-2", "cost-1"], "Page 3 of 3"),
    ],
)
def test_odd_page_numbers_follow_the_paginator(client, staff_user, costs, page, shown, label):
    client.force_login(staff_user)
    body, _summary = _get(client, f"?page={page}")
    assert _jobs(body) == shown and label in body


def test_a_member_sees_and_counts_only_their_projects(client, costs):
    client.force_login(costs["alice"])
    body, _summary = _get(client)
    assert _jobs(body) == ["cost-5", "cost-4"] and "Page 1 of 3" in body
    body, _summary = _get(client, "?page=3")
    assert _jobs(body) == ["cost-1"] and "cost-100" not in body


def test_an_empty_ledger_and_a_bad_month(client, staff_user, costs):
    client.force_login(staff_user)
    body, _summary = _get(client, "?month=2001-01")
    assert "No metered usage" in body and "pagination" not in body
    body, summary = _get(client, "?month=13-2026")
    assert "No metered usage" in body and not summary
