"""Migration 0003 fills the name snapshot of bills finalized before it (past the PostgreSQL trigger
that freezes finalized bills) and leaves the trigger armed."""

from __future__ import annotations

from datetime import date

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("billing", "0002_usageentry_allocation_in_jobs")]
AFTER = [("billing", "0003_bill_name_snapshot")]


@pytest.mark.django_db(transaction=True)
def test_0003_snapshots_finalized_bills_and_keeps_them_frozen():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Department = old.get_model("accounts", "Department")
    Project = old.get_model("accounts", "Project")
    BillingPeriod = old.get_model("billing", "BillingPeriod")
    Bill = old.get_model("billing", "Bill")
    department = Department.objects.create(name="旧部门", slug="old-dept")
    project = Project.objects.create(name="旧项目", slug="old-proj", department=department)
    period = BillingPeriod.objects.create(month=date(2026, 9, 1), state="closed")
    bill = Bill.objects.create(
        project=project,
        period=period,
        month=date(2026, 9, 1),
        state="finalized",
        finalized_at="2026-10-01T00:00Z",
    )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    stored = new.get_model("billing", "Bill").objects.get(pk=bill.pk)
    assert (stored.project_name, stored.project_slug, stored.department_name) == (
        "旧项目",
        "old-proj",
        "旧部门",
    )
    if connection.vendor == "postgresql":
        with pytest.raises(IntegrityError), transaction.atomic():
            new.get_model("billing", "Bill").objects.filter(pk=bill.pk).update(project_name="changed")
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
