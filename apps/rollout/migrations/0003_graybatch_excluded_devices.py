from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rollout", "0002_benchmark_run_profile"),
    ]

    operations = [
        migrations.AddField(
            model_name="graybatch",
            name="excluded_devices",
            field=models.JSONField(blank=True, default=list, verbose_name="cards left out"),
        ),
    ]
