"""The cost summaries (issue 31 §3): the ledger's sums per (job, billing month, project)
(``JobCostSummary``), per (job, project) over the months (``JobCostTotal``) and per (billing month,
project) (``ProjectCostSummary``), which the job-cost and bills pages read instead of every entry.

The ledger keeps them itself, in the transaction that writes its entries, whoever writes them (metering's
INSERT … SELECT, a COPY, bulk_create, a fixture): a failed metering run rolls them back with its entries.

* PostgreSQL: an AFTER INSERT statement trigger reads the statement's transition table (the entries
  really written: ON CONFLICT DO NOTHING leaves a re-metered slice out), sums it once per (job, month,
  project) and upserts the three summaries from those sums, adding, in one statement; an AFTER TRUNCATE
  trigger empties them with the ledger (a CASCADE from the allocations fires it too).
* SQLite (the demo): a row trigger adds each entry. SQLite rebuilds a table for most ALTERs and drops its
  triggers with it, so ``reinstall_after_migrate`` (post_migrate) puts the trigger back after every
  migrate.

The ledger refuses UPDATE and DELETE (billing 0001), so inserts are the only changes to follow.
Adjustments are per project and month, never per job: no summary holds them (nor did the pages).
Migration 0007 installs the triggers and backfills the summaries; a change to the SQL here needs a
migration that calls ``install`` again on PostgreSQL.
"""

from __future__ import annotations

# The summaries' tables and keys.
SUMMARIES = [
    ("billing_jobcostsummary", "job_id, month, project_id"),
    ("billing_jobcosttotal", "job_id, project_id"),
    ("billing_projectcostsummary", "month, project_id"),
]
_ENTRY_SUMS = "SUM(amount), SUM(cu_hours), COUNT(*)"
_SUMS_OF_SUMS = "SUM(amount), SUM(cu_hours), SUM(entries)"


def _upsert(table: str, keys: str, source: str, sums: str = _ENTRY_SUMS) -> str:
    """Add the sums of ``source``'s rows per key to ``table``; in key order, so concurrent writers
    lock a summary's rows in one order."""
    return f"""
INSERT INTO {table} ({keys}, amount, cu_hours, entries)
SELECT {keys}, {sums} FROM {source} GROUP BY {keys} ORDER BY {keys}
ON CONFLICT ({keys}) DO UPDATE SET
    amount = {table}.amount + EXCLUDED.amount,
    cu_hours = {table}.cu_hours + EXCLUDED.cu_hours,
    entries = {table}.entries + EXCLUDED.entries"""  # noqa: S608 - constant fragments


_PG_INSTALL = f"""
CREATE OR REPLACE FUNCTION billing_jobcostsummary_add() RETURNS trigger AS $$
BEGIN
    WITH s AS MATERIALIZED (
        SELECT job_id, month, project_id, SUM(amount) AS amount, SUM(cu_hours) AS cu_hours,
               COUNT(*) AS entries
        FROM billing_jobcost_new GROUP BY job_id, month, project_id
    ), total AS ({_upsert(*SUMMARIES[1], "s", _SUMS_OF_SUMS)}
    ), monthly AS ({_upsert(*SUMMARIES[2], "s", _SUMS_OF_SUMS)}
    ){_upsert(*SUMMARIES[0], "s", _SUMS_OF_SUMS)};
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS billing_jobcostsummary_add ON billing_usageentry;
CREATE TRIGGER billing_jobcostsummary_add
    AFTER INSERT ON billing_usageentry REFERENCING NEW TABLE AS billing_jobcost_new
    FOR EACH STATEMENT EXECUTE FUNCTION billing_jobcostsummary_add();

CREATE OR REPLACE FUNCTION billing_jobcostsummary_truncate() RETURNS trigger AS $$
BEGIN
    {" ".join(f"DELETE FROM {table};" for table, _keys in SUMMARIES)}
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS billing_jobcostsummary_truncate ON billing_usageentry;
CREATE TRIGGER billing_jobcostsummary_truncate
    AFTER TRUNCATE ON billing_usageentry FOR EACH STATEMENT EXECUTE FUNCTION billing_jobcostsummary_truncate();
"""  # noqa: S608 - constant fragments
_PG_UNINSTALL = """
DROP TRIGGER IF EXISTS billing_jobcostsummary_truncate ON billing_usageentry;
DROP TRIGGER IF EXISTS billing_jobcostsummary_add ON billing_usageentry;
DROP FUNCTION IF EXISTS billing_jobcostsummary_truncate();
DROP FUNCTION IF EXISTS billing_jobcostsummary_add();
"""
_SQLITE_NEW = (
    "(SELECT NEW.job_id AS job_id, NEW.month AS month, NEW.project_id AS project_id,"
    " NEW.amount AS amount, NEW.cu_hours AS cu_hours)"
)
_SQLITE_INSTALL = f"""
CREATE TRIGGER IF NOT EXISTS billing_jobcostsummary_add AFTER INSERT ON billing_usageentry
BEGIN
{"; ".join(_upsert(table, keys, _SQLITE_NEW) for table, keys in SUMMARIES)};
END;
"""
_SQLITE_UNINSTALL = "DROP TRIGGER IF EXISTS billing_jobcostsummary_add;"


def install(connection) -> None:
    """Put the ledger's summary triggers in place (idempotent); other databases have none."""
    sql = {"postgresql": _PG_INSTALL, "sqlite": _SQLITE_INSTALL}.get(connection.vendor)
    if sql:
        with connection.cursor() as cursor:
            cursor.execute(sql)


def uninstall(connection) -> None:
    sql = {"postgresql": _PG_UNINSTALL, "sqlite": _SQLITE_UNINSTALL}.get(connection.vendor)
    if sql:
        with connection.cursor() as cursor:
            cursor.execute(sql)


def backfill(connection) -> None:
    """Add every stored entry to the summaries (they start empty: migration 0007)."""
    with connection.cursor() as cursor:
        for table, keys in SUMMARIES:
            cursor.execute(_upsert(table, keys, "billing_usageentry"))
        if connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {', '.join(table for table, _keys in SUMMARIES)}")


def reinstall_after_migrate(sender, using: str = "default", **kwargs) -> None:
    """post_migrate: on SQLite, the trigger again once the summaries exist (a later migration that
    rebuilt ``billing_usageentry`` dropped it)."""
    from django.db import connections

    connection = connections[using]
    if connection.vendor == "sqlite" and SUMMARIES[0][0] in connection.introspection.table_names():
        install(connection)
