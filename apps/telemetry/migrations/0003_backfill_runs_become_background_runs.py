"""Metric backfills run as core BackgroundRuns: copy every BackfillRun into one (source and window in
``params``, the ingest report in ``result``, hour chunks as done/total), point their audit records
at the new rows, then drop BackfillRun."""

from django.db import migrations

KIND = "telemetry.backfill"
STATUS = {"queued": "queued", "running": "running", "done": "succeeded", "failed": "failed"}
STATE = {status: state for state, status in STATUS.items()}


def _content_type(apps, app_label, model):
    ContentType = apps.get_model("contenttypes", "ContentType")
    return ContentType.objects.filter(app_label=app_label, model=model).first()


def forward(apps, schema_editor):
    BackfillRun = apps.get_model("telemetry", "BackfillRun")
    BackgroundRun = apps.get_model("core", "BackgroundRun")
    ChangeRecord = apps.get_model("core", "ChangeRecord")
    User = apps.get_model("auth", "User")
    ContentType = apps.get_model("contenttypes", "ContentType")
    old_type = _content_type(apps, "telemetry", "backfillrun")
    new_type = None
    if old_type is not None:
        new_type, _created = ContentType.objects.get_or_create(app_label="core", model="backgroundrun")
    for old in BackfillRun.objects.select_related("source").order_by("pk").iterator():
        status = STATUS[old.state]
        over = status in ("succeeded", "failed")
        total = old.total_chunks
        run = BackgroundRun.objects.create(
            kind=KIND,
            status=status,
            params={
                "source": old.source_id,
                "source_name": old.source.name[:200],
                "start": old.start.isoformat(),
                "end": old.end.isoformat(),
                "legacy_id": old.pk,
            },
            result=old.report or {},
            progress_done=min(old.done_chunks, total) if total else 0,
            progress_total=total,
            error=old.error if status == "failed" else "",
            progress_message=old.error[:200] if status == "queued" else "",
            actor=User.objects.filter(username=old.requested_by).first() if old.requested_by else None,
            actor_label=old.requested_by,
            finished_at=(old.finished_at or old.created_at) if over else None,
        )
        BackgroundRun.objects.filter(pk=run.pk).update(
            created_at=old.created_at, started_at=old.created_at if status != "queued" else None
        )
        if old_type is not None:
            ChangeRecord.objects.filter(content_type=old_type, object_id=str(old.pk)).update(
                content_type=new_type, object_id=str(run.pk)
            )


def backward(apps, schema_editor):
    BackfillRun = apps.get_model("telemetry", "BackfillRun")
    BackgroundRun = apps.get_model("core", "BackgroundRun")
    ChangeRecord = apps.get_model("core", "ChangeRecord")
    MetricSource = apps.get_model("telemetry", "MetricSource")
    ContentType = apps.get_model("contenttypes", "ContentType")
    new_type = _content_type(apps, "core", "backgroundrun")
    old_type = None
    if new_type is not None:
        old_type, _created = ContentType.objects.get_or_create(app_label="telemetry", model="backfillrun")
    from django.utils.dateparse import parse_datetime

    for run in BackgroundRun.objects.filter(kind=KIND).order_by("pk").iterator():
        params = run.params or {}
        if not MetricSource.objects.filter(pk=params.get("source")).exists():
            continue  # the old model cascaded on its source: a run of a deleted source has no row
        old = BackfillRun.objects.create(
            source_id=params["source"],
            start=parse_datetime(params["start"]),
            end=parse_datetime(params["end"]),
            state=STATE[run.status],
            done_chunks=run.progress_done,
            total_chunks=run.progress_total,
            report=run.result or {},
            error=run.error or run.progress_message,
            requested_by=run.actor_label,
            finished_at=run.finished_at,
        )
        BackfillRun.objects.filter(pk=old.pk).update(created_at=run.created_at)
        if new_type is not None:
            ChangeRecord.objects.filter(content_type=new_type, object_id=str(run.pk)).update(
                content_type=old_type, object_id=str(old.pk)
            )
    BackgroundRun.objects.filter(kind=KIND).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0002_backfillrun"),
        ("core", "0002_backgroundrun"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
        migrations.DeleteModel(name="BackfillRun"),
    ]
