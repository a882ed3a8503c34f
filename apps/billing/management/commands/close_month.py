"""python manage.py close_month --month YYYY-MM [--export DIR] [--draft] [--idle-policy POLICY]"""

from django.core.management.base import BaseCommand, CommandError

from apps.billing import exports, services
from apps.billing.models import BillingPeriod, IdlePolicy
from apps.core.errors import ApplicationError


class Command(BaseCommand):
    help = "Meter and close a billing month: one bill per project; closing a closed month changes nothing."

    def add_arguments(self, parser):
        parser.add_argument("--month", required=True, help="YYYY-MM, in the platform time zone")
        parser.add_argument(
            "--export", metavar="DIR", help="write <project-slug>-<YYYY-MM>.csv|.xlsx|.pdf here"
        )
        parser.add_argument("--draft", action="store_true", help="leave the bills in draft (finalize later)")
        parser.add_argument(
            "--idle-policy", choices=IdlePolicy.values, help="idle-cost policy for this month"
        )

    def handle(self, *args, **options):
        try:
            month = services.parse_month(options["month"])
            before = BillingPeriod.objects.filter(month=month).values_list("state", flat=True).first()

            def progress(period: BillingPeriod) -> None:
                if options["verbosity"] >= 2:
                    self.stdout.write(
                        f"  {period.progress_done}/{period.progress_total} {period.progress_message}"
                    )

            period = services.month_close(
                month=month,
                actor="command:close_month",
                finalize=not options["draft"],
                idle_policy=options["idle_policy"],
                progress=progress,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message)
        bills = period.bills.count()
        if before == BillingPeriod.State.CLOSED:
            self.stdout.write(f"{period}: already closed ({bills} bills); nothing changed.")
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"{period}: {period.state}, {bills} bills, idle cost {period.idle_cost} "
                    f"({period.get_idle_policy_display()})"
                )
            )
        if options["export"]:
            written = exports.month_export_dir(period, options["export"])
            self.stdout.write(f"exported {len(written)} files to {options['export']}")
