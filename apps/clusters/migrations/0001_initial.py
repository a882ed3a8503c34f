"""The clusters app takes over ``PushAction`` and ``SimulatedCluster`` from scheduling, state only.

Their tables (``scheduling_pushaction``, ``scheduling_simulatedcluster``), constraints and indexes
stay exactly as scheduling's migrations 0002-0005 created them: no SQL runs here
(``SeparateDatabaseAndState``, Django "Migration Operations",
https://docs.djangoproject.com/en/5.2/ref/migration-operations/#separatedatabaseandstate). The
content types are renamed so permissions and audit rows pointing at them follow the models;
scheduling's 0007 removes the models from its own state afterwards.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

MODELS = ("pushaction", "simulatedcluster")


def _move_content_types(apps, source: str, target: str) -> None:
    """Rename the content types (permissions and audit rows follow); one already present under the
    target label (created by a partial rollback's post_migrate) is left alone."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    present = set(
        ContentType.objects.filter(app_label=target, model__in=MODELS).values_list("model", flat=True)
    )
    ContentType.objects.filter(app_label=source, model__in=set(MODELS) - present).update(app_label=target)


def content_types_to_clusters(apps, schema_editor):
    _move_content_types(apps, "scheduling", "clusters")


def content_types_to_scheduling(apps, schema_editor):
    _move_content_types(apps, "clusters", "scheduling")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("inventory", "0001_initial"),
        ("jobs", "0001_initial"),
        # The tables exist in their final shape from here on.
        ("scheduling", "0005_pushaction_superseded"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="SimulatedCluster",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("state", models.JSONField(blank=True, default=dict)),
                        ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "cluster",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="simulation",
                                to="inventory.cluster",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "simulated cluster",
                        "db_table": "scheduling_simulatedcluster",
                    },
                ),
                migrations.CreateModel(
                    name="PushAction",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("stream", models.CharField(db_index=True, default="", max_length=300)),
                        ("attempt", models.PositiveSmallIntegerField(default=0)),
                        ("seq", models.PositiveSmallIntegerField(default=0)),
                        (
                            "verb",
                            models.CharField(
                                choices=[("apply", "apply"), ("delete", "delete"), ("patch", "patch node")],
                                default="apply",
                                max_length=8,
                            ),
                        ),
                        ("object", models.JSONField(blank=True, default=dict)),
                        ("kind", models.CharField(max_length=40)),
                        ("namespace", models.CharField(blank=True, max_length=63)),
                        ("name", models.CharField(max_length=253)),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("pending", "pending"),
                                    ("applied", "applied"),
                                    ("failed", "failed"),
                                    ("superseded", "superseded"),
                                ],
                                default="pending",
                                max_length=10,
                            ),
                        ),
                        ("attempts", models.PositiveSmallIntegerField(default=0)),
                        ("last_error", models.TextField(blank=True)),
                        ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("applied_at", models.DateTimeField(blank=True, null=True)),
                        ("result", models.JSONField(blank=True, default=dict)),
                        (
                            "cluster",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="push_actions",
                                to="inventory.cluster",
                            ),
                        ),
                        (
                            "job",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="push_actions",
                                to="jobs.job",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "push action",
                        "db_table": "scheduling_pushaction",
                        "ordering": ["stream", "attempt", "seq"],
                        "indexes": [
                            models.Index(
                                condition=models.Q(("state", "pending")),
                                fields=["next_attempt_at"],
                                name="scheduling_push_pending_idx",
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("cluster", "stream", "attempt", "seq"),
                                name="scheduling_pushaction_unique_seq",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("state__in", ["pending", "applied", "failed", "superseded"])
                                ),
                                name="scheduling_pushaction_state_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("verb__in", ["apply", "delete", "patch"])),
                                name="scheduling_pushaction_verb_valid",
                            ),
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_types_to_clusters, content_types_to_scheduling),
    ]
