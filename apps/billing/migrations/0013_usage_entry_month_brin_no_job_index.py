"""The ledger's month index becomes a BRIN on PostgreSQL and its job index goes (issue 31 §3). The b-tree
on (month, project) had a few hundred keys, so every metered entry went to the hot end of a long posting
list; entries are appended month after month, so a BRIN finds a month's block ranges at almost no cost
per insert (a b-tree on SQLite, which has no BRIN). A job's entries are found through its allocations
(apps.billing.selectors.entries_of_job), whose key leads the (allocation, slice_start) unique index."""

import apps.core.indexes
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_user_preference'),
        ('billing', '0012_usage_entry_drop_low_cardinality_indexes'),
        ('catalog', '0005_mthreads_vendor'),
        ('inventory', '0016_device_capacity_index'),
        ('jobs', '0015_allocation_copied_keys_without_db_fk'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='usageentry',
            name='billing_entry_month_proj_idx',
        ),
        migrations.AlterField(
            model_name='usageentry',
            name='job',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='usage_entries', to='jobs.job'),
        ),
        migrations.AddIndex(
            model_name='usageentry',
            index=apps.core.indexes.BrinOnPostgres(fields=['month'], name='billing_entry_month_brin'),
        ),
    ]
