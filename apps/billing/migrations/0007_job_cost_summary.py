"""The cost summaries (issue 31 §3: ``JobCostSummary`` per job, billing month and project,
``JobCostTotal`` over the months, ``ProjectCostSummary`` over the jobs): the tables, the triggers that
keep them equal to the ledger's sums from now on and their backfill from the entries already stored, in
one transaction (no entry slips between the backfill and the triggers). The triggers' SQL is
``apps.billing.services.job_costs``'s.
"""

from decimal import Decimal

import django.db.models.deletion
from django.db import migrations, models


def summaries_create(apps, schema_editor):
    from apps.billing.services import job_costs

    job_costs.install(schema_editor.connection)
    job_costs.backfill(schema_editor.connection)


def summaries_drop(apps, schema_editor):
    from apps.billing.services import job_costs

    job_costs.uninstall(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_user_preference"),
        ("billing", "0006_usage_entry_lean_writes"),
        ("jobs", "0012_list_queue_and_allocation_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobCostSummary",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("month", models.DateField()),
                ("amount", models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=24)),
                ("cu_hours", models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=24)),
                ("entries", models.BigIntegerField(default=0)),
                (
                    "job",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="cost_summaries",
                        to="jobs.job",
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.project",
                    ),
                ),
            ],
            options={
                "verbose_name": "job cost summary",
                "verbose_name_plural": "job cost summaries",
                "indexes": [
                    models.Index(fields=["month", "-amount", "job"], name="billing_jobcost_month_amt_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job", "month", "project"), name="billing_jobcost_one_per_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="JobCostTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("amount", models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=24)),
                ("cu_hours", models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=24)),
                ("entries", models.BigIntegerField(default=0)),
                (
                    "job",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="cost_totals",
                        to="jobs.job",
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.project",
                    ),
                ),
            ],
            options={
                "verbose_name": "job cost total",
                "verbose_name_plural": "job cost totals",
                "indexes": [models.Index(fields=["-amount", "job"], name="billing_jobcosttotal_amt_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job", "project"), name="billing_jobcosttotal_one_per_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ProjectCostSummary",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("month", models.DateField()),
                ("amount", models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=24)),
                ("cu_hours", models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=24)),
                ("entries", models.BigIntegerField(default=0)),
                (
                    "project",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.project",
                    ),
                ),
            ],
            options={
                "verbose_name": "project cost summary",
                "verbose_name_plural": "project cost summaries",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("month", "project"), name="billing_projectcost_one_per_key"
                    )
                ],
            },
        ),
        migrations.RunPython(summaries_create, summaries_drop),
    ]
