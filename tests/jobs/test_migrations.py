"""Migration 0011 gives every existing allocation its job's project before the column turns NOT NULL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("jobs", "0010_job_list_sort_indexes")]
AFTER = [("jobs", "0011_allocation_project")]


@pytest.mark.django_db(transaction=True)
def test_0011_fills_each_allocations_project_from_its_job():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    # Only jobs went back: the ledger's and accounts' tables are read at their newest state.
    others = [
        n for app in ("accounts", "catalog", "inventory") for n in executor.loader.graph.leaf_nodes(app)
    ]
    old = executor.loader.project_state(BEFORE + others).apps
    Department, Project = (old.get_model("accounts", n) for n in ("Department", "Project"))
    Cluster, Pool, Node = (old.get_model("inventory", n) for n in ("Cluster", "Pool", "Node"))
    Device, DeviceModel = old.get_model("inventory", "Device"), old.get_model("catalog", "DeviceModel")
    Job, Allocation = old.get_model("jobs", "Job"), old.get_model("jobs", "Allocation")
    department = Department.objects.create(name="d", slug="d")
    vision, speech = (
        Project.objects.create(name=s, slug=s, namespace=f"ns-{s}", department=department)
        for s in ("vision", "speech")
    )
    cluster = Cluster.objects.create(name="c", slug="c")
    node = Node.objects.create(
        cluster=cluster, pool=Pool.objects.create(cluster=cluster, name="p", slug="p"), name="n1"
    )
    a100 = DeviceModel.objects.create(vendor="nvidia", kind="gpu", name="A100", slug="a100", memory_mib=81920)
    cards = [
        Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"GPU-{i}", device_model=a100)
        for i in range(3)
    ]
    started = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
    placed = {}
    for i, project in enumerate([vision, speech, vision]):
        job = Job.objects.create(
            project=project, name=f"j{i}", image="img", request_kind="whole_cards", device_model=a100, count=1
        )
        allocation = Allocation.objects.create(
            job=job,
            device=cards[i],
            node=node,
            whole_card=True,
            memory_mib=81920,
            compute_milli=1000,
            trace_id=uuid.uuid4(),
            started_at=started,
        )
        placed[allocation.pk] = project.pk
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    stored = dict(new.get_model("jobs", "Allocation").objects.values_list("pk", "project_id"))
    assert stored == placed
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
