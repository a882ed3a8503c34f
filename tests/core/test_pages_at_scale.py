"""List pages and list endpoints answer in a number of queries that does not grow with the rows
(no N+1): each is measured on a small fleet and again on one three times larger.

The timing at 10,000 nodes / 80,000 cards / 200,000 jobs is ``benchmarks/pages_at_scale.py`` (figures,
not timed tests)."""

from __future__ import annotations

import itertools
import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.catalog.models import DeviceModel
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.jobs.models import Allocation, Job
from apps.quotas.models import Quota

pytestmark = pytest.mark.django_db

# (label, url, most queries allowed at any size)
PAGES = [
    ("jobs page", "/jobs/", 40),
    ("nodes page", "/inventory/nodes/", 40),
    ("devices page", "/inventory/devices/", 40),
    ("fleet overview", "/inventory/", 60),
    ("quotas overview", "/quotas/", 60),
    ("allocations (admin list)", "/admin/jobs/allocation/", 40),
    ("jobs API", "/api/jobs/jobs/", 25),
    ("nodes API", "/api/inventory/nodes/", 25),
    ("devices API", "/api/inventory/devices/", 25),
    ("quota usage API", "/api/quotas/quotas/usage/", 40),
]
_seq = itertools.count()


def grow(n_nodes: int, n_jobs: int, *, models, pool, projects) -> None:
    """Add nodes (8 cards each), jobs in every state, and active allocations for the running ones."""
    k = next(_seq)
    nodes = Node.objects.bulk_create(
        Node(
            cluster=pool.cluster,
            pool=pool,
            name=f"n{k}-{i:04d}",
            driver_version="550.54.15",
            labels={"zone": "a"},
            switch=f"leaf-{i // 16}",
        )
        for i in range(n_nodes)
    )
    devices = Device.objects.bulk_create(
        Device(
            node=node,
            vendor=models[i % 2].vendor,
            device_model=models[i % 2],
            index=d,
            uuid=f"{node.name}-{d}",
            topology_group=f"g{d // 4}",
        )
        for i, node in enumerate(nodes)
        for d in range(8)
    )
    states = ["pending", "running", "running", "succeeded", "failed"]
    jobs = Job.objects.bulk_create(
        Job(
            project=projects[i % len(projects)],
            name=f"j{k}-{i}",
            image="x",
            request_kind="whole_cards",
            device_model=models[0],
            count=1,
            state=states[i % len(states)],
        )
        for i in range(n_jobs)
    )
    now = timezone.now()
    running = [j for j in jobs if j.state == "running"]
    free = [d for d in devices if d.device_model_id == models[0].pk]
    Allocation.objects.bulk_create(
        Allocation(
            job=job,
            device=device,
            node_id=device.node_id,
            whole_card=True,
            memory_mib=81920,
            compute_milli=1000,
            compute_units=Decimal("1"),
            trace_id=uuid.uuid4(),
            started_at=now,
        )
        for job, device in zip(running, free, strict=False)
    )


@pytest.fixture
def fleet(make_project):
    models = [
        DeviceModel.objects.create(
            vendor="nvidia", kind="gpu", name="A100 80GB SXM4", slug="a100", memory_mib=81920
        ),
        DeviceModel.objects.create(
            vendor="huawei", kind="npu", name="Ascend 910B3", slug="910b3", memory_mib=65536
        ),
    ]
    cluster = Cluster.objects.create(name="c", slug="c")
    pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
    projects = [make_project(f"p{i}") for i in range(3)]
    for project in projects:
        Quota.objects.create(project=project, guaranteed_cu=Decimal("8"), borrowing_limit_cu=Decimal("4"))
    return {"models": models, "pool": pool, "projects": projects}


def _count(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(ctx.captured_queries)


def test_list_pages_and_endpoints_do_not_query_per_row(
    client, staff_user, fleet, django_assert_max_num_queries
):
    client.force_login(staff_user)
    grow(6, 30, **fleet)
    for _label, url, _most in PAGES:  # warm per-process caches (catalog, settings) before counting
        client.get(url)
    small = {url: _count(client, url) for _label, url, _most in PAGES}
    grow(18, 90, **fleet)  # three times the rows
    big = {url: _count(client, url) for _label, url, _most in PAGES}
    grown = [
        f"{label}: {small[url]} -> {big[url]}" for label, url, _most in PAGES if big[url] > small[url] + 1
    ]
    # The same queries for three times the rows (one more for a page count is allowed).
    assert not grown, grown
    for _label, url, most in PAGES:
        with django_assert_max_num_queries(most):
            client.get(url)
