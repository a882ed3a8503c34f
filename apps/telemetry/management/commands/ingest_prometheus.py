"""python manage.py ingest_prometheus --url URL --start ISO --end ISO [--step 30s] [--cluster SLUG] [--source NAME]

Backfills a window from a Prometheus HTTP API (query_range), one hour-chunk (one transaction) at a
time, with a progress bar on standard error. Re-running the same window changes nothing.
"""

import json
import re

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core.errors import ApplicationError
from apps.inventory.models import Cluster
from apps.telemetry import ingest

_DURATION = re.compile(r"^(\d+)(ms|s|m|h)?$")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}


def parse_step(text: str) -> int:
    m = _DURATION.match(text.strip())
    if not m:
        raise CommandError(f"--step: not a duration like 10s, 1m: {text!r}")
    seconds = int(int(m.group(1)) * _UNIT[m.group(2)])
    if seconds < 1:
        raise CommandError("--step must be at least 1s")
    return seconds


def _when(name: str, text: str):
    value = parse_datetime(text)
    if value is None:
        raise CommandError(f"--{name}: not an ISO 8601 date-time: {text!r}")
    return timezone.make_aware(value) if timezone.is_naive(value) else value


class Command(BaseCommand):
    help = "Backfill utilization rollups from a Prometheus HTTP API (query_range)."

    def add_arguments(self, parser):
        parser.add_argument("--url", required=True, help="Prometheus base URL, e.g. http://prometheus:9090")
        parser.add_argument("--start", required=True)
        parser.add_argument("--end", required=True)
        parser.add_argument("--step", default="30s", help="query resolution (default 30s)")
        parser.add_argument("--cluster", help="only match devices of this cluster (slug)")
        parser.add_argument("--source", help="source name stored on the rollups (default prometheus:<url>)")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = int(width * done / total)
        self.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} hours", ending="")
        if done == total:
            self.stderr.write("")

    def handle(self, *args, **options):
        start, end = _when("start", options["start"]), _when("end", options["end"])
        cluster = None
        if options["cluster"]:
            cluster = Cluster.objects.filter(slug=options["cluster"]).first()
            if cluster is None:
                raise CommandError(f"unknown cluster {options['cluster']!r}")
        from apps.telemetry.prometheus import PrometheusError

        try:
            report = ingest.prometheus_ingest(
                url=options["url"],
                start=start,
                end=end,
                step_s=parse_step(options["step"]),
                source=options["source"],
                cluster=cluster,
                actor="command",
                progress=self._progress,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        except PrometheusError as exc:
            raise CommandError(str(exc)) from exc
        summary = report.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(summary, ensure_ascii=False, indent=2))
            return
        self.stdout.write(
            f"{summary['used']} samples used, {summary['skipped_total']} skipped {summary['skipped']}; "
            f"{summary['rollups_written']} 5-minute rollups, {summary['hourly_written']} hourly"
        )
