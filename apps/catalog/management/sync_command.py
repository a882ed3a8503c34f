"""The shape shared by the catalog's seed-loading commands (load_catalog, load_workload_profiles):
``--path FILE`` and ``--json``, an ApplicationError becomes a CommandError, counts printed."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import ApplicationError


class SyncCommand(BaseCommand):
    """Set ``path_help`` (the --path help), ``summary`` (a format string over the counts) and
    ``sync(path=...)`` (runs the upsert, returns the counts) in a subclass."""

    path_help = ""
    summary = ""

    def sync(self, *, path):
        raise NotImplementedError

    def add_arguments(self, parser):
        parser.add_argument("--path", default=None, help=self.path_help)
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")

    def handle(self, *args, **options):
        try:
            counts = self.sync(path=options["path"])
        except ApplicationError as exc:
            raise CommandError(exc.message)
        if options["json"]:
            self.stdout.write(json.dumps(counts, sort_keys=True))
            return
        self.stdout.write(self.style.SUCCESS(self.summary.format(**counts)))
