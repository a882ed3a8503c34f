"""Nodes an agent registers arrive pending approval; agent tokens may be bound to nodes.

Existing nodes keep working: they were admitted before approvals existed, so they are not
pending (the default). Existing tokens get no node pattern: they may still report for the nodes
of their cluster, but a node they register from now on arrives pending approval, and they cannot
move cards from another cluster. Staff bind them to nodes in the admin.
"""

from django.db import migrations, models

import apps.inventory.models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0005_ledger_import_runs_become_background_runs"),
    ]

    operations = [
        migrations.AddField(
            model_name="agenttoken",
            name="node_pattern",
            field=models.CharField(
                blank=True,
                help_text="The node (or nodes, '*' = any characters) this token reports for; empty: any node of the cluster, new nodes arrive pending approval.",
                max_length=253,
                validators=[apps.inventory.models.validate_node_pattern],
            ),
        ),
        migrations.AddField(
            model_name="node",
            name="pending_approval",
            field=models.BooleanField(
                db_index=True,
                default=False,
                help_text="registered by a node agent; takes no work until approved",
            ),
        ),
        migrations.AlterField(
            model_name="deviceevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("registered", "registered"),
                    ("version_changed", "version changed"),
                    ("health_changed", "health changed"),
                    ("lost", "lost"),
                    ("found", "found"),
                    ("moved", "moved"),
                    ("maintenance", "maintenance"),
                    ("quarantine", "quarantine"),
                    ("retired", "retired"),
                    ("status_changed", "status changed"),
                    ("model_unrecognized", "model unrecognized"),
                    ("imported", "imported"),
                    ("report_overdue", "reports overdue"),
                    ("reports_resumed", "reports resumed"),
                    ("updated", "updated"),
                    ("not_ready", "NotReady in Kubernetes"),
                    ("cordon", "cordon"),
                    ("conflict", "conflict"),
                ],
                db_index=True,
                max_length=24,
            ),
        ),
        migrations.AlterField(
            model_name="node",
            name="name",
            field=models.CharField(max_length=253, validators=[apps.inventory.models.validate_node_name]),
        ),
    ]
