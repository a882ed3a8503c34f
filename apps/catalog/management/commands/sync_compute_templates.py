"""python manage.py sync_compute_templates [--json]: generate the built-in compute templates (idempotent)."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.catalog.services import compute_template_sync_builtin
from apps.core.errors import ApplicationError


class Command(BaseCommand):
    help = (
        "Create or refresh the built-in compute templates from the device catalog: whole card, MIG "
        "profiles, vNPU templates, halves and quarters. Run load_catalog first."
    )

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")

    def handle(self, *args, **options):
        try:
            counts = compute_template_sync_builtin(actor="command:sync_compute_templates")
        except ApplicationError as exc:
            raise CommandError(exc.message)
        if options["json"]:
            self.stdout.write(json.dumps(counts, sort_keys=True, ensure_ascii=False))
            return
        self.stdout.write(
            self.style.SUCCESS(
                "compute templates: {created} created, {updated} updated, {unchanged} unchanged".format(
                    **counts
                )
            )
        )
        for reason in counts["skipped"]:
            self.stdout.write(f"  skipped: {reason}")
