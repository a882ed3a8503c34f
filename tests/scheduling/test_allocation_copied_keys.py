"""Allocation.project and Allocation.node are copies with no database constraint of their own (jobs
0015, issue 31 §2): the ORM still refuses to delete a project or a node that allocations name, and the
database still refuses it through the keys the copies come from (the job's project, the card's node)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from apps.inventory.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(make_project, devices, make_job, make_allocation):
    job = make_job(make_project("vision"), name="held")
    return make_allocation(job, devices[0], timezone.now())


def test_the_orm_refuses_to_delete_a_node_or_project_that_allocations_name(held):
    with pytest.raises(ProtectedError):
        held.node.delete()
    with pytest.raises(ProtectedError):
        held.project.delete()
    assert Node.objects.filter(pk=held.node_id).exists()


@pytest.mark.parametrize(
    ("table", "column"), [("inventory_node", "node_id"), ("accounts_project", "project_id")]
)
def test_the_database_refuses_it_through_the_keys_the_copies_come_from(held, table, column):
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DELETE FROM {table} WHERE id = %s", [getattr(held, column)])  # noqa: S608
