"""UsageEntry.template's index holds only the entries that have a template (issue 31 §3): most entries
(whole cards, slices) have none, and indexing their NULLs cost every metering insert a b-tree insertion.
PROTECT's check and the ledger's template filter always name one template, which the partial index
answers."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0010_allocation_delete_after_metering"),
        ("catalog", "0005_mthreads_vendor"),
    ]

    operations = [
        migrations.AlterField(
            model_name="usageentry",
            name="template",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="usage_entries",
                to="catalog.computetemplate",
            ),
        ),
        migrations.AddIndex(
            model_name="usageentry",
            index=models.Index(
                condition=models.Q(("template__isnull", False)),
                fields=["template"],
                name="billing_entry_template_idx",
            ),
        ),
    ]
