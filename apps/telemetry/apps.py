from django.apps import AppConfig
from django.db.models.signals import post_migrate


def job_utilization_chart(job, user) -> str:
    """The job's utilization curve (busy ÷ allocated per 5-minute window), or "". Registered in
    ``apps.scheduling.extensions.JOB_UTILIZATION_CHART`` (the job pages sit below us)."""
    from django.utils.safestring import mark_safe

    from apps.inventory.charts import figure_html
    from apps.telemetry import charts, selectors

    report = selectors.job_utilization(user=user, pk=job.pk)
    if not report["points"]:
        return ""
    fig = charts.curve_figure(report["points"], name=report["name"])
    # Plotly escapes the data it embeds; the name is stripped of markup (charts._plain).
    return mark_safe(figure_html(fig, div_id="job-utilization-chart"))  # noqa: S308


class TelemetryConfig(AppConfig):
    name = "apps.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from apps.scheduling.extensions import JOB_UTILIZATION_CHART
        from apps.telemetry.first_start import first_start_receive

        JOB_UTILIZATION_CHART.register(job_utilization_chart)
        from apps.core.stored_text import stored_vocabulary
        from apps.telemetry.models import Quality

        stored_vocabulary(Quality)  # "exact" / "estimated" on the pages, shown translated (|localized)
        # First start: PROMETHEUS_URL → the default cluster's metric source (after the clusters app).
        post_migrate.connect(first_start_receive, sender=self, dispatch_uid="telemetry.first_start")
