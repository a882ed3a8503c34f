"""python manage.py recommend --profile P --target N [--latency-ms L] [--vendor V ...] [--json]
python manage.py recommend --profiles [--json]

Which card or slice for a workload, at what cost per unit of work (the same answer as
``GET /api/catalog/recommendations/``)."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.benchlib.recommend import profiles_summary, recommend
from apps.core.errors import ApplicationError


class Command(BaseCommand):
    help = "Rank device models and compute templates by cost per unit of work for a workload profile."

    def add_arguments(self, parser):
        parser.add_argument("--profile", help="workload profile key, e.g. resnet50-infer")
        parser.add_argument("--target", help="throughput to reach, in the profile's unit")
        parser.add_argument("--latency-ms", dest="latency_ms", help="p99 latency bound (ms)")
        parser.add_argument("--vendor", action="append", default=[], help="allowed vendor (repeatable)")
        parser.add_argument(
            "--profiles", action="store_true", help="list the profiles and measurement counts"
        )
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args, **options):
        if options["profiles"]:
            rows = profiles_summary()
            if options["json"]:
                self.stdout.write(json.dumps({"profiles": rows}, ensure_ascii=False, indent=2))
                return
            for row in rows:
                self.stdout.write(
                    f"{row['profile']:<18} {row['unit']:<10} {row['measurements']:>5} measurements"
                )
            return
        if not options["profile"] or options["target"] is None:
            raise CommandError("give --profile and --target (or --profiles)")
        try:
            answer = recommend(
                profile=options["profile"],
                target=options["target"],
                latency_ms=options["latency_ms"],
                vendors=options["vendor"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message)
        if options["json"]:
            self.stdout.write(json.dumps(answer.as_dict(), ensure_ascii=False, indent=2))
            return
        self.stdout.write(
            f"{answer.target} {answer.profile.unit} of {answer.profile.key} (ranked by {answer.ranked_by})"
        )
        for option in answer.options:
            if not option.has_data or option.cu_per_hour is None:
                self.stdout.write(f"  {option.label:<40} no data ({option.reason})")
                continue
            money = (
                f", {option.money_per_hour} {option.currency}/h" if option.money_per_hour is not None else ""
            )
            self.stdout.write(
                f"  {option.label:<40} {option.fits_text}: {option.cu_per_hour} CU/h{money}; "
                f"{option.cu_hours_per_million} CU·h per million; {option.basis}, "
                f"{len(option.evidence.measurements)} measurement(s)"
            )
