from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0015_device_in_service_index"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="device",
            index=models.Index(
                condition=models.Q(("health__in", ["healthy", "degraded"])),
                fields=["node", "vendor", "device_model"],
                name="inventory_device_capacity_idx",
            ),
        ),
    ]
