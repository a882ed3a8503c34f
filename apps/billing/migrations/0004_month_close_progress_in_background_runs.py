"""A month close runs as a core BackgroundRun: BillingPeriod gets ``close_run`` and loses its own
progress fields. Every period that had a close under way or done (draft, closed, or closing) gets a
run carrying its progress, so its page shows the same numbers as before."""

import django.db.models.deletion
from django.db import migrations, models

KIND = "billing.month_close"


def forward(apps, schema_editor):
    BillingPeriod = apps.get_model("billing", "BillingPeriod")
    BackgroundRun = apps.get_model("core", "BackgroundRun")
    for period in BillingPeriod.objects.exclude(state="open").order_by("month").iterator():
        closing = period.state == "closing"
        total = period.progress_total
        run = BackgroundRun.objects.create(
            kind=KIND,
            # A close under way resumes when its task (or close_month) runs again.
            status="running" if closing else "succeeded",
            params={"period": period.pk, "month": period.month.strftime("%Y-%m")},
            progress_done=min(period.progress_done, total) if total else 0,
            progress_total=total,
            progress_message=period.progress_message,
            actor_label=period.closed_by or "migration",
            finished_at=None if closing else (period.closed_at or period.updated_at),
        )
        BackgroundRun.objects.filter(pk=run.pk).update(
            created_at=period.updated_at, started_at=period.updated_at
        )
        BillingPeriod.objects.filter(pk=period.pk).update(close_run=run)


def backward(apps, schema_editor):
    BillingPeriod = apps.get_model("billing", "BillingPeriod")
    BackgroundRun = apps.get_model("core", "BackgroundRun")
    for period in BillingPeriod.objects.filter(close_run__isnull=False).select_related("close_run"):
        run = period.close_run
        BillingPeriod.objects.filter(pk=period.pk).update(
            progress_done=run.progress_done,
            progress_total=run.progress_total,
            progress_message=run.progress_message,
        )
    BillingPeriod.objects.update(close_run=None)
    BackgroundRun.objects.filter(kind=KIND).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0003_bill_name_snapshot"),
        ("core", "0002_backgroundrun"),
    ]

    operations = [
        migrations.AddField(
            model_name="billingperiod",
            name="close_run",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="core.backgroundrun",
            ),
        ),
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="billingperiod", name="progress_done"),
        migrations.RemoveField(model_name="billingperiod", name="progress_message"),
        migrations.RemoveField(model_name="billingperiod", name="progress_total"),
    ]
