"""PushAction and SimulatedCluster now belong to the clusters app (state only: the tables stay)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0006_allocation_moved_to_jobs"),
        ("clusters", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="PushAction"),
                migrations.DeleteModel(name="SimulatedCluster"),
            ],
        ),
    ]
