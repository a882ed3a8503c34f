"""Allocation.project and Allocation.node keep PROTECT in the ORM but no database foreign key (issue 31
§2): both are copies (the job's project, the card's node) that the job's and the card's own keys
already hold; their checks at commit, one per allocation row and a key-share lock on each node a
cycle placed on, were a fifth of a 10,000-node cycle's commits."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_user_preference"),
        ("inventory", "0016_device_capacity_index"),
        ("jobs", "0014_job_state_priority_without_own_index"),
    ]

    operations = [
        migrations.AlterField(
            model_name="allocation",
            name="node",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="allocations",
                to="inventory.node",
            ),
        ),
        migrations.AlterField(
            model_name="allocation",
            name="project",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="accounts.project",
            ),
        ),
    ]
