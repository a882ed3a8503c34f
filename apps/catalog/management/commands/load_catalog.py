"""python manage.py load_catalog [--path FILE] [--json]: load the built-in device catalog (idempotent)."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.catalog.services import DEFAULT_CATALOG_PATH, catalog_sync
from apps.core.errors import ApplicationError


class Command(BaseCommand):
    help = "Upsert the built-in device models (and their default coefficients) from the catalog file."

    def add_arguments(self, parser):
        parser.add_argument("--path", default=None, help=f"catalog file (default: {DEFAULT_CATALOG_PATH})")
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")

    def handle(self, *args, **options):
        try:
            counts = catalog_sync(actor="command:load_catalog", path=options["path"])
        except ApplicationError as exc:
            raise CommandError(exc.message)
        if options["json"]:
            self.stdout.write(json.dumps(counts, sort_keys=True))
            return
        self.stdout.write(
            self.style.SUCCESS(
                "device models: {created} created, {updated} updated, {unchanged} unchanged; "
                "{coefficients_created} default coefficients created".format(**counts)
            )
        )
