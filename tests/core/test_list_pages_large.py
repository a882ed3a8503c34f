"""What the list pages do differently on a large fleet (issue 20), and that what users rely on stays:
the device page's node filter becomes a text box past NODE_SELECT_MAX nodes (ids in links still work),
an unfiltered job list past ESTIMATE_ABOVE rows shows an estimated count and still pages to the end,
the allocation admin lists only the chosen node, the fleet report lists the first idle cards, the
job-cost page is paginated."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from apps.billing.models import BillingPeriod, UsageEntry
from apps.catalog.models import DeviceModel
from apps.core import paginators
from apps.inventory import filtersets
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.jobs.models import Allocation, Job
from apps.jobs.views import listing as job_views
from apps.telemetry import views as telemetry_views
from apps.telemetry.models import DeviceRollup
from apps.telemetry.services import fleet_rollups_rebuild
from tests.fixtures.jobs import whole_card_allocation

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(make_project):
    a100 = DeviceModel.objects.create(vendor="nvidia", kind="gpu", name="A100", slug="a100", memory_mib=81920)
    cluster = Cluster.objects.create(name="c", slug="c")
    other = Cluster.objects.create(name="d", slug="d")
    shared = Pool.objects.create(cluster=cluster, name="shared", slug="shared")
    private = Pool.objects.create(
        cluster=cluster, name="private", slug="private", owner_project=make_project("owner")
    )
    made = {}
    for name, c, pool in (
        ("n-a", cluster, shared),
        ("n-b", cluster, shared),
        ("twin", cluster, shared),
        ("twin", other, None),
        ("n-p", cluster, private),
    ):
        node = Node.objects.create(cluster=c, pool=pool, name=name)
        Device.objects.create(
            node=node, vendor="nvidia", device_model=a100, index=0, uuid=f"GPU-{c.slug}-{name}"
        )
        made[(c.slug, name)] = node
    return made


def _uuids(body: str) -> set[str]:
    return {u for u in ("GPU-c-n-a", "GPU-c-n-b", "GPU-c-twin", "GPU-d-twin", "GPU-c-n-p") if u in body}


def test_the_device_page_node_filter_is_a_drop_down_on_a_small_fleet(client, staff_user, nodes):
    client.force_login(staff_user)
    body = client.get("/inventory/devices/").content.decode()
    assert '<select name="node"' in body
    assert f'<option value="{nodes[("c", "n-b")].pk}">c / n-b</option>' in body


def test_the_device_page_takes_a_node_by_id_or_name_on_a_large_fleet(client, staff_user, nodes, monkeypatch):
    monkeypatch.setattr(filtersets, "NODE_SELECT_MAX", 2)
    client.force_login(staff_user)
    body = client.get("/inventory/devices/").content.decode()
    assert '<select name="node"' not in body and 'name="node"' in body  # no option per node
    assert "<option" not in body.split('name="node"')[1].split(">")[0]

    body = client.get(f"/inventory/devices/?node={nodes[('c', 'n-b')].pk}").content.decode()
    assert _uuids(body) == {"GPU-c-n-b"}  # the links from the node and device pages keep working
    assert 'value="c / n-b"' in body  # the box shows the node, not its id

    assert _uuids(client.get("/inventory/devices/?node=n-a").content.decode()) == {"GPU-c-n-a"}
    assert _uuids(client.get("/inventory/devices/?node=d / twin").content.decode()) == {"GPU-d-twin"}
    # A name two clusters use, or no node at all: a field error, and the other filters still apply.
    for value in ("twin", "nope"):
        response = client.get("/inventory/devices/", {"node": value})
        assert response.status_code == 200
        assert "has-error" in response.content.decode()
        assert len(_uuids(response.content.decode())) == 5


def test_a_member_cannot_pick_a_node_they_cannot_see_by_name(
    client, make_user, make_project, nodes, monkeypatch
):
    monkeypatch.setattr(filtersets, "NODE_SELECT_MAX", 1)
    member = make_user("m")
    make_project("mine", members=[member])
    client.force_login(member)
    assert _uuids(client.get("/inventory/devices/?node=n-a").content.decode()) == {"GPU-c-n-a"}
    body = client.get("/inventory/devices/", {"node": "c / n-p"}).content.decode()  # another project's pool
    assert "has-error" in body and "GPU-c-n-p" not in body


@pytest.fixture
def many_jobs(make_project):
    project = make_project("p")
    a100 = DeviceModel.objects.create(vendor="nvidia", kind="gpu", name="A100", slug="a100", memory_mib=81920)
    Job.objects.bulk_create(
        Job(
            project=project,
            name=f"job-{i:02d}",
            image="x",
            request_kind="whole_cards",
            device_model=a100,
            count=1,
        )
        for i in range(12)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")  # the planner's row count (rows of this transaction count)
    return project


def test_an_unfiltered_job_list_over_the_estimate_threshold_shows_an_estimated_count(
    client, staff_user, many_jobs, monkeypatch
):
    monkeypatch.setattr(paginators.EstimatedCountPaginator, "estimate_above", 10)
    monkeypatch.setattr(job_views, "PAGE_SIZE", 5)
    client.force_login(staff_user)
    body = client.get("/jobs/").content.decode()
    assert 'id="jobs-count-estimated"' in body and "about 12 jobs (estimated)" in body
    assert "Page 1 of about 3" in body
    names = set()
    for page in (1, 2, 3):
        body = client.get(f"/jobs/?page={page}").content.decode()
        names |= {f"job-{i:02d}" for i in range(12) if f">job-{i:02d}<" in body}
        assert ('rel="next"' in body) == (page < 3)  # "next" from the rows, not from the estimate
    assert len(names) == 12
    # Filtered, the count is exact.
    body = client.get("/jobs/?state=pending").content.decode()
    assert "jobs-count-estimated" not in body and "12 jobs" in body
    # CSV export of the filtered list is unchanged by the paginator.
    csv = client.get("/jobs/?format=csv").content.decode()
    assert csv.count("\n") == 13


def test_under_the_threshold_the_job_count_is_exact(client, staff_user, many_jobs):
    client.force_login(staff_user)
    body = client.get("/jobs/").content.decode()
    assert "jobs-count-estimated" not in body and "12 jobs" in body


def _allocate(job, device, **extra) -> Allocation:
    started = timezone.now() - dt.timedelta(hours=2)
    return whole_card_allocation(job, device, compute_units=Decimal(1), started_at=started, **extra)


def test_the_allocation_admin_lists_only_the_chosen_node(client, staff_user, nodes, make_project):
    project = make_project("alloc")
    devices = list(Device.objects.order_by("pk"))
    for i, device in enumerate(devices):
        job = Job.objects.create(
            project=project, name=f"a{i}", image="x", state="running", request_kind="whole_cards", count=1
        )
        _allocate(job, device)
    client.force_login(staff_user)
    body = client.get("/admin/jobs/allocation/").content.decode()
    assert "node__id__exact=" not in body  # no link per node in the sidebar
    chosen = nodes[("c", "n-b")]
    body = client.get(f"/admin/jobs/allocation/?node__id__exact={chosen.pk}").content.decode()
    others = [n for n in nodes.values() if n.pk != chosen.pk]
    assert not [n for n in others if f"node__id__exact={n.pk}&" in body or f'node__id__exact={n.pk}"' in body]
    assert "n-b#nvidia0" in body and "n-a#nvidia0" not in body


def test_the_fleet_report_lists_the_first_idle_cards(client, staff_user, nodes, monkeypatch):
    monkeypatch.setattr(telemetry_views, "IDLE_CARDS_SHOWN", 2)
    now = timezone.now()
    window = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=now.minute % 5 + 10)
    for device in Device.objects.all():
        DeviceRollup.objects.create(
            device=device,
            window_start=window,
            source="t",
            sample_count=2,
            first_sample_at=window,
            last_sample_at=window + dt.timedelta(seconds=60),
            util_sum=2.0,
            util_n=2,
            util_avg=1.0,
            util_max=1.0,
        )
    # What ingest does after writing rollups (the report reads whole hours from the card summaries).
    fleet_rollups_rebuild(
        resolution=300, source="t", windows=[window], node_ids=[n.pk for n in nodes.values()]
    )
    client.force_login(staff_user)
    body = client.get("/telemetry/").content.decode()
    assert 'id="idle-cards-more"' in body and "The first 2 idle cards" in body
    assert body.count("/inventory/devices/") >= 2


def test_the_job_cost_page_is_paginated(client, staff_user, nodes, make_project, monkeypatch):
    from apps.billing import views as billing_views

    monkeypatch.setattr(billing_views, "PAGE_SIZE", 2)
    project = make_project("costly")
    month = timezone.localdate().replace(day=1)
    BillingPeriod.objects.create(month=month, state=BillingPeriod.State.OPEN)
    start = dt.datetime.combine(month, dt.time(), tzinfo=dt.UTC)
    for i, device in enumerate(Device.objects.order_by("pk")[:3]):
        job = Job.objects.create(
            project=project, name=f"cost-{i}", image="x", state="running", request_kind="whole_cards", count=1
        )
        allocation = _allocate(job, device)
        UsageEntry.objects.create(
            project=project,
            job=job,
            allocation=allocation,
            month=month,
            slice_start=start,
            slice_end=start + dt.timedelta(hours=1),
            hours=Decimal(1),
            compute_units=Decimal(1),
            cu_hours=Decimal(1),
            unit_price=Decimal(i + 1),
            amount=Decimal(i + 1),
        )
    client.force_login(staff_user)
    first = client.get("/billing/jobs/").content.decode()
    second = client.get("/billing/jobs/?page=2").content.decode()
    assert ">cost-2<" in first and ">cost-1<" in first and ">cost-0<" not in first  # dearest first
    assert ">cost-0<" in second and 'rel="prev"' in second
