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


def job_card_curves(job, user) -> str:
    """Per card of the job's allocations: utilization, memory used, temperature and power over the
    job's life, one chart per metric (a line per card), and for each card whose exporter does not
    give a metric, a note saying so. "" when the job never held a card. Registered in
    ``apps.scheduling.extensions.JOB_CARD_CURVES``."""
    from django.template.loader import render_to_string
    from django.utils.safestring import mark_safe
    from django.utils.translation import gettext as _

    from apps.inventory.charts import figure_html
    from apps.telemetry import charts, selectors

    report = selectors.job_card_curves(user=user, pk=job.pk)
    cards = report["cards"]
    if not cards:
        return ""
    sections = []
    for metric, title in charts.card_metric_titles().items():
        fig = charts.card_metric_figure(cards, metric)
        notes = [
            _("%(card)s: not reported by %(exporter)s") % {"card": c["label"], "exporter": c["exporter"]}
            for c in cards
            if metric in c["missing"]
        ]
        sections.append(
            {
                "metric": metric,
                "title": title,
                # Plotly escapes the data it embeds; card labels are stripped of markup (charts._plain).
                "chart": mark_safe(figure_html(fig, div_id=f"job-card-{metric}-chart")) if fig else "",  # noqa: S308
                "notes": notes,
            }
        )
    return render_to_string(
        "telemetry/_job_card_curves.html",
        {
            "sections": sections,
            "waiting": [c["label"] for c in cards if not c["points"]],
            "resolution_min": report["resolution"] // 60,
            "clipped_days": selectors.CARD_CURVE_MAX_SPAN.days if report["clipped"] else None,
        },
    )


class TelemetryConfig(AppConfig):
    name = "apps.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from apps.scheduling.extensions import JOB_CARD_CURVES, JOB_UTILIZATION_CHART
        from apps.telemetry.first_start import first_start_receive

        JOB_UTILIZATION_CHART.register(job_utilization_chart)
        JOB_CARD_CURVES.register(job_card_curves)
        # The device and node pages' metric history (issue 29 §5).
        from apps.inventory.extensions import DEVICE_HISTORY, NODE_HISTORY
        from apps.telemetry.history_views import device_history_panel, node_history_panel

        DEVICE_HISTORY.register(device_history_panel)
        NODE_HISTORY.register(node_history_panel)
        from apps.core.stored_text import stored_vocabulary
        from apps.telemetry.models import Quality

        stored_vocabulary(Quality)  # "exact" / "estimated" on the pages, shown translated (|localized)
        # First start: PROMETHEUS_URL → the default cluster's metric source (after the clusters app).
        post_migrate.connect(first_start_receive, sender=self, dispatch_uid="telemetry.first_start")
        # The chips device plugins name on the pods a reconcile pass lists (Ascend's AscendReal).
        from apps.clusters.signals import pods_listed
        from apps.telemetry.plugin_readback import pods_listed_receive

        pods_listed.connect(pods_listed_receive, dispatch_uid="telemetry.plugin_readback")
