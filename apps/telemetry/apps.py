from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TelemetryConfig(AppConfig):
    name = "apps.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from apps.core.stored_text import stored_vocabulary
        from apps.telemetry.first_start import first_start_receive
        from apps.telemetry.models import Quality

        stored_vocabulary(Quality)  # "exact" / "estimated" on the pages, shown translated (|localized)
        # First start: PROMETHEUS_URL → the default cluster's metric source (after the clusters app).
        post_migrate.connect(first_start_receive, sender=self, dispatch_uid="telemetry.first_start")
