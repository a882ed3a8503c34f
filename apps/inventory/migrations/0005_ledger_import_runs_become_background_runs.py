"""Ledger imports run as core BackgroundRuns: copy every LedgerImportRun into one (the CSV, the dry-run
flag and the row count in ``params``; the report and the row errors in ``result``), point their audit
records at the new rows, then drop LedgerImportRun."""

from django.db import migrations

KIND = "inventory.ledger_import"
STATUS = {"queued": "queued", "running": "running", "done": "succeeded", "failed": "failed"}
STATE = {status: state for state, status in STATUS.items()}


def _content_type(apps, model):
    ContentType = apps.get_model("contenttypes", "ContentType")
    return ContentType.objects.filter(app_label=model[0], model=model[1]).first()


def forward(apps, schema_editor):
    LedgerImportRun = apps.get_model("inventory", "LedgerImportRun")
    BackgroundRun = apps.get_model("core", "BackgroundRun")
    ChangeRecord = apps.get_model("core", "ChangeRecord")
    User = apps.get_model("auth", "User")
    old_type = _content_type(apps, ("inventory", "ledgerimportrun"))
    new_type = None
    if old_type is not None:
        ContentType = apps.get_model("contenttypes", "ContentType")
        new_type, _created = ContentType.objects.get_or_create(app_label="core", model="backgroundrun")
    for old in LedgerImportRun.objects.order_by("pk").iterator():
        status = STATUS[old.state]
        over = status in ("succeeded", "failed")
        run = BackgroundRun.objects.create(
            kind=KIND,
            status=status,
            params={"text": old.text, "dry_run": old.dry_run, "rows": old.rows, "legacy_id": old.pk},
            result={"report": old.report or {}, "errors": old.errors or []},
            error=old.error_message if status == "failed" else "",
            # A queued run's message said why it was still waiting (the broker was down).
            progress_message=old.error_message[:200] if status == "queued" else "",
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
    LedgerImportRun = apps.get_model("inventory", "LedgerImportRun")
    BackgroundRun = apps.get_model("core", "BackgroundRun")
    ChangeRecord = apps.get_model("core", "ChangeRecord")
    new_type = _content_type(apps, ("core", "backgroundrun"))
    old_type = None
    if new_type is not None:
        ContentType = apps.get_model("contenttypes", "ContentType")
        old_type, _created = ContentType.objects.get_or_create(app_label="inventory", model="ledgerimportrun")
    for run in BackgroundRun.objects.filter(kind=KIND).order_by("pk").iterator():
        params, result = run.params or {}, run.result or {}
        old = LedgerImportRun.objects.create(
            text=params.get("text", ""),
            dry_run=bool(params.get("dry_run")),
            rows=params.get("rows", 0),
            state=STATE[run.status],
            report=result.get("report", {}),
            errors=result.get("errors", []),
            error_message=run.error or run.progress_message,
            requested_by=run.actor_label,
            finished_at=run.finished_at,
        )
        LedgerImportRun.objects.filter(pk=old.pk).update(created_at=run.created_at)
        if new_type is not None:
            ChangeRecord.objects.filter(content_type=new_type, object_id=str(run.pk)).update(
                content_type=old_type, object_id=str(old.pk)
            )
    BackgroundRun.objects.filter(kind=KIND).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0004_ledgerimportrun"),
        ("core", "0002_backgroundrun"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
        migrations.DeleteModel(name="LedgerImportRun"),
    ]
