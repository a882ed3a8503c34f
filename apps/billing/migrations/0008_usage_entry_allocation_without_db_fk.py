"""UsageEntry.allocation keeps PROTECT in the ORM but no database foreign key (issue 31 §3): its check
at commit, a row lock on each of a month's allocations, was about a third of metering a month."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_job_cost_summary"),
        ("jobs", "0011_allocation_project"),
    ]

    operations = [
        migrations.AlterField(
            model_name="usageentry",
            name="allocation",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="usage_entries",
                to="jobs.allocation",
            ),
        ),
    ]
