"""Allocation moves from the scheduling app to the jobs app (state only: the table stays
``scheduling_allocation``, with its constraint and index names), so that every layer below
scheduling — clusters, quotas — can read what runs where without importing scheduling."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0004_ledgerimportrun"),
        ("jobs", "0004_job_failure_class"),
        ("scheduling", "0005_pushaction_superseded"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Allocation",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("replica", models.PositiveSmallIntegerField(default=0)),
                        ("attempt", models.PositiveSmallIntegerField(default=0)),
                        ("whole_card", models.BooleanField(default=False)),
                        ("memory_mib", models.PositiveIntegerField()),
                        ("compute_milli", models.PositiveIntegerField()),
                        (
                            "isolation",
                            models.CharField(
                                choices=[("hard", "hard isolation"), ("shared", "shared")],
                                default="hard",
                                max_length=8,
                            ),
                        ),
                        ("partition_profile", models.CharField(blank=True, max_length=40)),
                        ("compute_units", models.DecimalField(decimal_places=4, default=0, max_digits=12)),
                        ("borrowed", models.BooleanField(default=False)),
                        ("trace_id", models.UUIDField(db_index=True)),
                        ("started_at", models.DateTimeField(db_index=True)),
                        ("released_at", models.DateTimeField(blank=True, db_index=True, null=True)),
                        ("release_reason", models.CharField(blank=True, max_length=200)),
                        (
                            "device",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="allocations",
                                to="inventory.device",
                            ),
                        ),
                        (
                            "job",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="allocations",
                                to="jobs.job",
                            ),
                        ),
                        (
                            "node",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="allocations",
                                to="inventory.node",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "allocation",
                        "db_table": "scheduling_allocation",
                        "ordering": ["-started_at", "-id"],
                        "indexes": [
                            models.Index(
                                condition=models.Q(("released_at__isnull", True)),
                                fields=["device"],
                                name="scheduling_alloc_active_idx",
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("released_at__isnull", True), ("whole_card", True)),
                                fields=("device",),
                                name="scheduling_allocation_one_active_whole_card",
                            ),
                            models.UniqueConstraint(
                                fields=("job", "device", "replica", "attempt"),
                                name="scheduling_allocation_unique_slot",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("compute_milli__gte", 1), ("compute_milli__lte", 1000)),
                                name="scheduling_allocation_compute_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("whole_card", False), ("compute_milli", 1000), _connector="OR"
                                ),
                                name="scheduling_allocation_whole_card_is_whole",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("released_at__isnull", True),
                                    ("released_at__gte", models.F("started_at")),
                                    _connector="OR",
                                ),
                                name="scheduling_allocation_release_after_start",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("isolation__in", ["hard", "shared"])),
                                name="scheduling_allocation_isolation_valid",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
