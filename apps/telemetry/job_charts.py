"""The job page's telemetry panels (``apps.jobs.views.detail`` calls them): the job's utilization curve and
its per-card metric curves, rendered as HTML."""

from __future__ import annotations


def job_utilization_chart(job, user) -> str:
    """The job's utilization curve (busy ÷ allocated per 5-minute window), or "". Shown on the job page
    (``apps.jobs.views.detail``)."""
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
    give a metric, a note saying so. "" when the job never held a card. Shown on the job page
    (``apps.jobs.views.detail``)."""
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
