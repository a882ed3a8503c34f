from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0011_new_accelerator_vendors"),
    ]

    operations = [
        migrations.AddField(
            model_name="device",
            name="dra_mig_devices",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
