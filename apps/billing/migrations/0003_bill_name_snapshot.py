"""A finalized bill keeps the project and department names it was finalized with.

Adds the snapshot fields, fills them for the bills finalized before this migration (from the names
they have now: the best record there is), then makes the database insist on them. The PostgreSQL
trigger that freezes finalized bills (0001) is switched off for the fill only, inside this
migration's transaction.
"""

from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery

TRIGGER = "billing_bill_finalized_immutable"


def snapshot_fill(apps, schema_editor):
    Bill = apps.get_model("billing", "Bill")
    Project = apps.get_model("accounts", "Project")
    bills = Bill.objects.filter(state="finalized", project_slug="")
    if not bills.exists():
        return
    postgres = schema_editor.connection.vendor == "postgresql"
    if postgres:
        schema_editor.execute(f"ALTER TABLE billing_bill DISABLE TRIGGER {TRIGGER}")
    project = Project.objects.filter(pk=OuterRef("project_id"))
    bills.update(
        project_name=Subquery(project.values("name")[:1]),
        project_slug=Subquery(project.values("slug")[:1]),
        department_name=Subquery(project.values("department__name")[:1]),
    )
    if postgres:
        schema_editor.execute(f"ALTER TABLE billing_bill ENABLE TRIGGER {TRIGGER}")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("billing", "0002_usageentry_allocation_in_jobs"),
    ]

    operations = [
        migrations.AddField(
            model_name="bill",
            name="project_name",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="bill",
            name="project_slug",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name="bill",
            name="department_name",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.RunPython(snapshot_fill, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="bill",
            constraint=models.CheckConstraint(
                condition=Q(state="draft") | ~Q(project_slug=""),
                name="billing_bill_finalized_has_names",
            ),
        ),
    ]
