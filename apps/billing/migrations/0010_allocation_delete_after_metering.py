"""Deleting an allocation that a metering run is writing entries for waits for the run and is then
refused (issue 31 §3; billing 0008 dropped the database foreign key, whose check at commit locked every
allocation of a month). Django's PROTECT only sees committed entries, so on PostgreSQL a row trigger
on the allocations takes a SHARE lock on the ledger (it waits for every transaction writing entries)
and then looks for entries naming the row, with a fresh snapshot; it costs metering nothing.
SQLite serializes writers: PROTECT alone is enough there."""

from django.db import migrations

INSTALL = """
CREATE OR REPLACE FUNCTION billing_allocation_keep_metered() RETURNS trigger AS $$
BEGIN
    LOCK TABLE billing_usageentry IN SHARE MODE;
    IF EXISTS (SELECT 1 FROM billing_usageentry WHERE allocation_id = OLD.id) THEN
        RAISE EXCEPTION 'allocation % is named by usage entries; it cannot be deleted', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN OLD;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS billing_allocation_keep_metered ON scheduling_allocation;
CREATE TRIGGER billing_allocation_keep_metered BEFORE DELETE ON scheduling_allocation
    FOR EACH ROW EXECUTE FUNCTION billing_allocation_keep_metered();
"""
UNINSTALL = """
DROP TRIGGER IF EXISTS billing_allocation_keep_metered ON scheduling_allocation;
DROP FUNCTION IF EXISTS billing_allocation_keep_metered();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:  # no parameters: the % in RAISE is plpgsql's
            cursor.execute(INSTALL)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(UNINSTALL)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0009_usage_entry_rate_card_without_db_fk"),
        ("jobs", "0011_allocation_project"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
