"""Allocation now lives in the jobs app (state only: its table is kept and now belongs to jobs)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0005_pushaction_superseded"),
        ("jobs", "0005_allocation_from_scheduling"),
        ("billing", "0002_usageentry_allocation_in_jobs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="Allocation")],
        ),
    ]
