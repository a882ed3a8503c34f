"""UsageEntry.allocation points at the Allocation model's new home in the jobs app (state only)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0001_initial"),
        ("jobs", "0005_allocation_from_scheduling"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="usageentry",
                    name="allocation",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="usage_entries",
                        to="jobs.allocation",
                    ),
                ),
            ],
        ),
    ]
