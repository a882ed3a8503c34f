"""Plotly figures for the rollout pages (rendered like ``apps.inventory.charts``: plotly.js is local)."""

from __future__ import annotations

import plotly.graph_objects as go
from django.utils.translation import gettext as _
from plotly.subplots import make_subplots

from apps.inventory.charts import FONT_FAMILY, figure_html

COLORS = {
    "util": "#2b6cb0",
    "temp": "#c05621",
    "errors": "#c53030",
    "limit": "#718096",
    "replicas": "#2f855a",
}


def soak_evidence_html(result, criteria) -> str:
    """Per hour of the soak: average utilization and hottest card (top), error counts (bottom), with
    the criteria's temperature limit."""
    series = (result.evidence or {}).get("series") or [] if result else []
    if not series:
        return ""
    hours = [p["hour"] for p in series]
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.65, 0.35], specs=[[{"secondary_y": True}], [{}]]
    )
    fig.add_scatter(
        x=hours,
        y=[p["util_avg"] for p in series],
        name=_("utilization %"),
        line={"color": COLORS["util"]},
        row=1,
        col=1,
    )
    fig.add_scatter(
        x=hours,
        y=[p["temp_max"] for p in series],
        name=_("hottest card °C"),
        line={"color": COLORS["temp"]},
        row=1,
        col=1,
        secondary_y=True,
    )
    fig.add_scatter(
        x=[hours[0], hours[-1]],
        y=[float(criteria.max_temperature_c)] * 2,
        name=_("temperature limit"),
        mode="lines",
        line={"color": COLORS["limit"], "dash": "dash"},
        row=1,
        col=1,
        secondary_y=True,
    )
    fig.add_bar(
        x=hours,
        y=[p["error_events"] for p in series],
        name=_("critical events"),
        marker_color=COLORS["errors"],
        row=2,
        col=1,
    )
    fig.add_bar(
        x=hours,
        y=[p["counter_errors"] for p in series],
        name=_("error counter increase"),
        marker_color="#ed8936",
        row=2,
        col=1,
    )
    fig.update_layout(
        font={"family": FONT_FAMILY},
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
        legend={"orientation": "h", "y": -0.15},
        height=420,
        barmode="group",
    )
    fig.update_yaxes(title_text=_("utilization %"), range=[0, 100], row=1, col=1, secondary_y=False)
    fig.update_yaxes(title_text="°C", row=1, col=1, secondary_y=True)
    fig.update_yaxes(title_text=_("errors"), row=2, col=1)
    return figure_html(fig, div_id="soak-evidence")


def scale_history_html(decisions) -> str:
    """Replica count over time from the decision history (a step line), one trace per service."""
    decisions = sorted(decisions, key=lambda d: d.created_at)
    if not decisions:
        return ""
    by_job: dict[str, list] = {}
    for d in decisions:
        by_job.setdefault(str(d.job), []).append(d)
    fig = go.Figure()
    for name, rows in by_job.items():
        x = [rows[0].created_at] + [d.created_at for d in rows]
        y = [rows[0].from_replicas] + [d.reached_replicas for d in rows]
        fig.add_scatter(x=x, y=y, name=name, line={"shape": "hv"}, mode="lines+markers")
    fig.update_layout(
        font={"family": FONT_FAMILY},
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
        yaxis_title=_("replicas"),
        legend={"orientation": "h", "y": -0.2},
        height=300,
    )
    return figure_html(fig, div_id="scale-history")
