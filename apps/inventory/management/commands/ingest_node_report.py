"""python manage.py ingest_node_report --node NAME --kind KIND|auto FILE [--cluster SLUG] [--dry-run] [--json]

The same code path as POST /api/inventory/node-reports/.
"""

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import ApplicationError
from apps.inventory.models import Cluster, NodeReport
from apps.inventory.services import discovery
from apps.inventory.vendors import AUTO


class Command(BaseCommand):
    help = "Parse a vendor tool's output for a node and upsert the ledger (or only print it with --dry-run)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="the tool output; '-' reads standard input")
        parser.add_argument("--node", required=True)
        parser.add_argument(
            "--kind",
            required=True,
            choices=[*NodeReport.Kind.values, AUTO],
            help="the tool that printed FILE; 'auto' recognises it by its content (the output says which)",
        )
        parser.add_argument("--cluster", help="cluster slug (needed to register an unknown node)")
        parser.add_argument("--dry-run", action="store_true", help="parse and print; write nothing")
        parser.add_argument("--json", action="store_true", help="print the parsed report as JSON")

    def handle(self, *args, **options):
        path = options["file"]
        try:
            text = (
                sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8", errors="replace")
            )
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        cluster = None
        if options["cluster"]:
            cluster = Cluster.objects.filter(slug=options["cluster"]).first()
            if cluster is None:
                raise CommandError(f"unknown cluster {options['cluster']!r}")
        try:
            result = discovery.node_report_ingest(
                node_name=options["node"],
                kind=options["kind"],
                text=text,
                actor="command",
                cluster=cluster,
                dry_run=options["dry_run"],
            )
        except ApplicationError as exc:
            detail = f" {json.dumps(exc.details, ensure_ascii=False)}" if exc.details else ""
            raise CommandError(f"{exc.message}{detail}") from exc
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict(), ensure_ascii=False, indent=2))
            return
        parsed = result.parsed
        detected = " (recognised by --kind auto)" if parsed.requested_kind == AUTO else ""
        self.stdout.write(
            f"{parsed.kind}{detected}: {len(parsed.devices)} devices, {len(parsed.links)} links, "
            f"driver {parsed.node.get('driver_version') or 'unknown'}"
        )
        if not options["dry_run"]:
            self.stdout.write(json.dumps(result.summary()))
        for warning in parsed.warnings + result.warnings:
            self.stderr.write(f"warning: {warning}")
