"""UsageEntry.device_model, .pool and .rate_card lose their b-tree indexes (issue 31 §3): a few values
each, so every metered entry went to the hot end of one of a handful of long posting lists; on a
100,000-card month (2.1 M entries) the three were a fifth of the ledger INSERT and 0.4 GB of its WAL.
PROTECT's check on deleting a model, pool or rate card and the ledger's model filter read the ledger
without them."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0011_usage_entry_template_index_partial'),
        ('catalog', '0005_mthreads_vendor'),
        ('inventory', '0016_device_capacity_index'),
    ]

    operations = [
        migrations.AlterField(
            model_name='usageentry',
            name='device_model',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='usage_entries', to='catalog.devicemodel'),
        ),
        migrations.AlterField(
            model_name='usageentry',
            name='pool',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='usage_entries', to='inventory.pool'),
        ),
        migrations.AlterField(
            model_name='usageentry',
            name='rate_card',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='usage_entries', to='billing.ratecard'),
        ),
    ]
