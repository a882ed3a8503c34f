from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "apps.quotas"
    label = "quotas"
    verbose_name = "Quotas"

    def ready(self) -> None:
        # Quotas sit above the benchmark library: they tell it the most CU a project may hold.
        from apps.benchlib.recommend import QUOTA_CEILING
        from apps.quotas.library import quota_ceiling

        QUOTA_CEILING.register(quota_ceiling)
