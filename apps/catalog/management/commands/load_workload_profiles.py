"""python manage.py load_workload_profiles [--path FILE] [--json]: load the built-in workload profiles."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.catalog.workloads import DEFAULT_PROFILES_PATH, workload_profile_sync
from apps.core.errors import ApplicationError


class Command(BaseCommand):
    help = "Upsert the built-in workload profiles (benchmark library) from the profiles file."

    def add_arguments(self, parser):
        parser.add_argument(
            "--path", default=None, help=f"profiles file (default: {DEFAULT_PROFILES_PATH.name})"
        )
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")

    def handle(self, *args, **options):
        try:
            counts = workload_profile_sync(actor="command:load_workload_profiles", path=options["path"])
        except ApplicationError as exc:
            raise CommandError(exc.message)
        if options["json"]:
            self.stdout.write(json.dumps(counts, sort_keys=True))
            return
        self.stdout.write(
            self.style.SUCCESS(
                "workload profiles: {created} created, {updated} updated, {unchanged} unchanged".format(
                    **counts
                )
            )
        )
