from django.db import migrations, models


def retired_cards_leave_the_pools(apps, schema_editor):
    """Cards retired before this migration kept their pool status (usually "production")."""
    Device = apps.get_model("inventory", "Device")
    Device.objects.filter(health="retired").exclude(pool_status="retired").update(pool_status="retired")


def retired_cards_back_to_production(apps, schema_editor):
    Device = apps.get_model("inventory", "Device")
    Device.objects.filter(pool_status="retired").update(pool_status="production")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_user_preference"),
        ("catalog", "0005_mthreads_vendor"),
        ("inventory", "0013_mthreads_vendor"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="device",
            name="inventory_device_pool_status_valid",
        ),
        migrations.AlterField(
            model_name="device",
            name="pool_status",
            field=models.CharField(
                choices=[
                    ("production", "production"),
                    ("gray", "gray"),
                    ("quarantine", "quarantine"),
                    ("retired", "retired"),
                ],
                default="production",
                max_length=12,
            ),
        ),
        migrations.RunPython(retired_cards_leave_the_pools, retired_cards_back_to_production),
        migrations.AddConstraint(
            model_name="device",
            constraint=models.CheckConstraint(
                condition=models.Q(("pool_status__in", ["production", "gray", "quarantine", "retired"])),
                name="inventory_device_pool_status_valid",
            ),
        ),
    ]
