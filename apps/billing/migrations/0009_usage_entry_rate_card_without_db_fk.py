"""UsageEntry.rate_card keeps PROTECT in the ORM but no database foreign key (issue 31 §3), like the
allocation in 0008: its check at commit took a key-share lock on the rate card once per entry of a
month. Metering locks every rate card (key share) in its transaction instead, and rate_card_delete locks
the card before asking whether an entry names it (apps.billing.services.rate_cards), so a card cannot be
deleted under entries being written; the index stays (that question reads it)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0008_usage_entry_allocation_without_db_fk"),
    ]

    operations = [
        migrations.AlterField(
            model_name="usageentry",
            name="rate_card",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="usage_entries",
                to="billing.ratecard",
            ),
        ),
    ]
