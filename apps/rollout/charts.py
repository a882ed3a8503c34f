"""Plotly figures for the rollout pages (rendered like ``apps.inventory.charts``: plotly.js is local)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import plotly.graph_objects as go
from django.utils.translation import gettext as _
from plotly.subplots import make_subplots

from apps.core.formatting import chart_time
from apps.inventory.charts import FONT_FAMILY, figure_html

HOUR = timedelta(hours=1)
MAX_SLOTS = 90 * 24  # SoakCriteria.min_days is at most 90
SOAK_CHART_HEIGHT = 460
COLORS = {
    "util": "#2b6cb0",
    "temp": "#c05621",
    "errors": "#c53030",
    "limit": "#718096",
    "replicas": "#2f855a",
}


def _soak_grid(result, series: list[dict]) -> list[dict]:
    """One slot per hour of the soak window (the series' interval: hourly telemetry rollups, see
    ``selectors.soak_measure``), so a 20 h soak draws 20 points and an hour without telemetry is a gap
    on the time axis instead of a soak that looks one hour long. Critical events come from the ledger,
    not from telemetry: an hour without any is a 0; a counter increase without telemetry is unknown."""
    by_hour = {datetime.fromisoformat(p["hour"]): p for p in series}
    first = min(by_hour)
    last = max(by_hour)
    if result.window_start:
        first = min(first, result.window_start.replace(minute=0, second=0, microsecond=0))
    if result.window_end and result.window_end > result.window_start:
        # The hour the window ends in (an end on the hour closes the hour before it).
        end = result.window_end - timedelta(microseconds=1)
        last = max(last, end.replace(minute=0, second=0, microsecond=0))
    grid = []
    hour = first
    while hour <= last and len(grid) <= MAX_SLOTS:
        point = by_hour.get(hour)
        grid.append(
            {
                "hour": hour,
                "util_avg": point.get("util_avg") if point else None,
                "temp_max": point.get("temp_max") if point else None,
                "counter_errors": point.get("counter_errors") if point else None,
                "error_events": (point.get("error_events") or 0) if point else 0,
            }
        )
        hour += HOUR
    return grid


def _count_axis(values: list) -> dict:
    """A count axis from 0 with whole-number ticks (at most about five): never −1…1 when all are 0."""
    top = max([v for v in values if v is not None] or [0])
    step = max(1, math.ceil(top / 5))
    upper = max(1, math.ceil(top / step) * step)
    return {
        "range": [0, upper * 1.05 if top else 1],
        "rangemode": "tozero",
        "tick0": 0,
        "dtick": step,
        "tickformat": ",d",
    }


def soak_evidence_html(result, criteria) -> str:
    """Per hour of the soak: average utilization and hottest card (top), error counts (bottom), with
    the criteria's temperature limit. The legend sits above the plots, inside the figure's height."""
    series = (result.evidence or {}).get("series") or [] if result else []
    if not series:
        return ""
    grid = _soak_grid(result, series)
    hours = [p["hour"] for p in grid]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.65, 0.35],
        vertical_spacing=0.08,
        specs=[[{"secondary_y": True}], [{}]],
    )
    fig.add_scatter(
        x=hours,
        y=[p["util_avg"] for p in grid],
        name=_("utilization %"),
        mode="lines+markers",
        marker={"size": 4},
        connectgaps=False,
        line={"color": COLORS["util"]},
        row=1,
        col=1,
    )
    fig.add_scatter(
        x=hours,
        y=[p["temp_max"] for p in grid],
        name=_("hottest card °C"),
        mode="lines+markers",
        marker={"size": 4},
        connectgaps=False,
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
        y=[p["error_events"] for p in grid],
        name=_("critical events"),
        marker_color=COLORS["errors"],
        row=2,
        col=1,
    )
    fig.add_bar(
        x=hours,
        y=[p["counter_errors"] for p in grid],
        name=_("error counter increase"),
        marker_color="#ed8936",
        row=2,
        col=1,
    )
    fig.update_layout(
        font={"family": FONT_FAMILY},
        margin={"l": 10, "r": 10, "t": 70, "b": 30},
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"},
        height=SOAK_CHART_HEIGHT,
        barmode="group",
    )
    # Chart times are wall-clock strings in the reader's zone (figure_html converts the traces alike).
    fig.update_xaxes(range=[chart_time(hours[0] - HOUR / 2), chart_time(hours[-1] + HOUR / 2)])
    fig.update_yaxes(title_text=_("utilization %"), range=[0, 100], row=1, col=1, secondary_y=False)
    fig.update_yaxes(title_text="°C", rangemode="tozero", row=1, col=1, secondary_y=True)
    counts = [p["error_events"] for p in grid] + [p["counter_errors"] for p in grid]
    fig.update_yaxes(title_text=_("errors"), row=2, col=1, **_count_axis(counts))
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
