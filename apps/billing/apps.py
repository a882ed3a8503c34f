from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        # Billing sits above the submit page and the benchmark library: it fills their price slots.
        from apps.benchlib.recommend import PRICE_PER_CU_HOUR
        from apps.billing.providers import job_cost_per_hour, price_per_cu_hour
        from apps.scheduling.extensions import JOB_COST_PER_HOUR

        JOB_COST_PER_HOUR.register(job_cost_per_hour)
        PRICE_PER_CU_HOUR.register(price_per_cu_hour)
