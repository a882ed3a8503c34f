"""The ledger's write cost (issue 31 §3): a usage entry has no database foreign key (its keys are copies of
the allocation's rows, or the allocation itself, read in the transaction that writes the entry, and the
rate card, locked by metering: tests/billing/test_rate_card_race.py), no index of it is covered by
another's leading columns, and PROTECT still guards ORM deletes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import ProtectedError

from apps.billing.models import UsageEntry
from apps.catalog.models import DeviceModel

TABLE = UsageEntry._meta.db_table


def _constraints() -> dict:
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, TABLE)


def test_no_foreign_key_in_the_database(db):
    keys = {tuple(c["columns"]) for c in _constraints().values() if c["foreign_key"]}
    assert keys == set()


def test_no_index_is_a_prefix_of_another(db):
    indexed = [tuple(c["columns"]) for c in _constraints().values() if c["index"] or c["unique"]]
    covered = {a for a in indexed for b in indexed if a != b and len(a) < len(b) and b[: len(a)] == a}
    assert covered == set()
    assert ("allocation_id", "slice_start") in indexed and ("month",) in indexed


def test_protect_still_refuses_deleting_what_an_entry_names(closed_september):
    entry = UsageEntry.objects.exclude(device_model=None).first()
    with pytest.raises(ProtectedError) as refused:
        DeviceModel.objects.get(pk=entry.device_model_id).delete()
    assert entry in refused.value.protected_objects
    with pytest.raises(ProtectedError) as refused:
        entry.project.delete()
    assert entry in refused.value.protected_objects
    with pytest.raises(ProtectedError) as refused:
        entry.allocation.delete()
    assert entry in refused.value.protected_objects
    with pytest.raises(ProtectedError) as refused:
        entry.rate_card.delete()
    assert entry in refused.value.protected_objects


def test_the_template_index_answers_what_names_one_template(db):
    """The partial index (entries with a template only) serves PROTECT's check and the template filter."""
    indexed = {name: c for name, c in _constraints().items() if c["index"]}
    assert indexed["billing_entry_template_idx"]["columns"] == ["template_id"]
    query = UsageEntry.objects.filter(template_id=1).values("pk").query
    sql, params = query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_seqscan")
    assert "billing_entry_template_idx" in plan


def test_the_ledger_keeps_only_the_indexes_its_reads_need(db):
    """Every index costs each metered entry a b-tree insertion (issue 31 §3): the few-valued keys
    (model, pool, rate card) have none."""
    indexed = {tuple(c["columns"]) for c in _constraints().values() if c["index"] or c["unique"]}
    for column in ("device_model_id", "pool_id", "rate_card_id", "job_id"):
        assert not any(cols[0] == column for cols in indexed), column
    assert ("slice_start", "id") in indexed and ("project_id", "slice_start") in indexed
    # the month's index is a BRIN on PostgreSQL (entries are appended month after month)
    month = next(c for c in _constraints().values() if c["index"] and c["columns"] == ["month"])
    assert month["type"] == ("brin" if connection.vendor == "postgresql" else "idx")


def test_a_jobs_entries_are_found_through_its_allocations(closed_september):
    from apps.billing.selectors import entries_of_job

    jobs = set(UsageEntry.objects.values_list("job_id", flat=True))
    assert len(jobs) > 1
    for job_id in jobs:
        found = set(entries_of_job(UsageEntry.objects.all(), job_id).values_list("pk", flat=True))
        assert found == set(UsageEntry.objects.filter(job_id=job_id).values_list("pk", flat=True)) != set()
