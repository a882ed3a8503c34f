"""The jobs table keeps no index another index's leading columns already serve (issue 31): a job's
state change is a non-HOT update, so every index on the table takes one more entry for it, and a
scheduling cycle changes the state of thousands of jobs."""

from __future__ import annotations

from django.db import connection

from apps.jobs.models import Job


def _indexed_columns() -> list[tuple[str, ...]]:
    """The key columns of every index on the table that covers all its rows (partial ones left out:
    a partial index serves only its own rows, so it never makes a full one redundant)."""
    sql = """
        SELECT array_agg(a.attname ORDER BY k.ord)
        FROM pg_index ix
        JOIN pg_class t ON t.oid = ix.indrelid
        CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
        WHERE t.relname = %s AND ix.indpred IS NULL AND k.ord <= ix.indnkeyatts
        GROUP BY ix.indexrelid
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [Job._meta.db_table])
        return [tuple(row[0]) for row in cursor.fetchall()]


def test_no_index_on_jobs_is_a_prefix_of_another(db):
    indexed = _indexed_columns()
    covered = {a for a in indexed for b in indexed if len(a) < len(b) and b[: len(a)] == a}
    assert covered == set()
    # what the state and the priority are still found by
    assert ("state", "id") in indexed and ("priority", "created_at") in indexed
