from django.apps import AppConfig
from django.db.models.signals import post_migrate


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        # Billing sits above the benchmark library: it fills its price slot (the submit page, a web
        # module, calls apps.billing.providers.job_cost_per_hour directly).
        from apps.benchlib.recommend import PRICE_PER_CU_HOUR
        from apps.billing.providers import price_per_cu_hour

        PRICE_PER_CU_HOUR.register(price_per_cu_hour)

        # SQLite drops a table's triggers when a migration rebuilds it: the cost summaries' goes back.
        post_migrate.connect(_job_cost_trigger, sender=self, dispatch_uid="billing-job-costs")


def _job_cost_trigger(sender, **kwargs) -> None:
    from apps.billing.services.job_costs import reinstall_after_migrate

    reinstall_after_migrate(sender, **kwargs)
