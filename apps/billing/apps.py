from django.apps import AppConfig


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
