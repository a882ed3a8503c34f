"""python manage.py ingest_metrics --file FILE.prom [--at ISO_TIME] [--cluster SLUG] [--source NAME] [--dry-run] [--json]

Ingests one exporter scrape in Prometheus text format; the vendor is detected from the metric names.
With ``--dry-run --json`` nothing is written and the normalized samples are printed:
``{"vendor": ..., "samples": [{"device": {"uuid", "serial", "pci_bus_id", "index", "node"}, "mig_profile",
"utilization_pct", "memory_used_mib", "memory_total_mib", "temperature_c", "power_w", "pod", "namespace"}],
"report": {...}}``.
"""

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core.errors import ApplicationError
from apps.inventory.models import Cluster
from apps.telemetry import ingest


class Command(BaseCommand):
    help = "Ingest one exporter scrape (Prometheus text format) into utilization rollups."

    def add_arguments(self, parser):
        parser.add_argument("--file", required=True, help="the /metrics page; '-' reads standard input")
        parser.add_argument(
            "--at", help="scrape time (ISO 8601) for samples without a timestamp; default now"
        )
        parser.add_argument("--cluster", help="only match devices of this cluster (slug)")
        parser.add_argument("--source", default="exporter", help="source name stored on the rollups")
        parser.add_argument("--dry-run", action="store_true", help="parse and normalize; write nothing")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args, **options):
        path = options["file"]
        try:
            text = (
                sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8", errors="replace")
            )
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        at = None
        if options["at"]:
            at = parse_datetime(options["at"])
            if at is None:
                raise CommandError(f"--at: not an ISO 8601 date-time: {options['at']!r}")
            if timezone.is_naive(at):
                at = timezone.make_aware(at)
        cluster = None
        if options["cluster"]:
            cluster = Cluster.objects.filter(slug=options["cluster"]).first()
            if cluster is None:
                raise CommandError(f"unknown cluster {options['cluster']!r}")
        try:
            report, conversion = ingest.scrape_ingest(
                text=text,
                source=options["source"],
                at=at,
                cluster=cluster,
                actor="command",
                dry_run=options["dry_run"],
            )
        except ApplicationError as exc:
            detail = f" {json.dumps(exc.details, ensure_ascii=False)}" if exc.details else ""
            raise CommandError(f"{exc.message}{detail}") from exc
        vendor = conversion.vendors[0] if len(conversion.vendors) == 1 else (conversion.vendors or None)
        if options["json"]:
            body = {
                "vendor": vendor,
                "samples": [s.as_dry_run() for s in conversion.samples],
                "report": report.as_dict(),
            }
            self.stdout.write(json.dumps(body, ensure_ascii=False, indent=2))
            return
        summary = report.as_dict()
        self.stdout.write(
            f"{vendor or 'unknown vendor'}: {summary['received']} samples, {summary['used']} used, "
            f"{summary['skipped_total']} skipped {summary['skipped']}; {summary['rollups_written']} rollups"
            + (" (dry run)" if options["dry_run"] else "")
        )
