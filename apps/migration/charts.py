"""Plotly figures of the migration cockpit (same pattern as apps/inventory/charts.py: plotly.js is loaded
once by the page from our static files; a figure is a <div> plus an inline script)."""

from __future__ import annotations

from decimal import Decimal

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from apps.inventory.charts import FONT_FAMILY, _plain, figure_html

__all__ = ["figure_html", "track_series_figure", "vendor_share_figure"]

VENDOR_COLORS = {
    "nvidia": "#76b900",
    "huawei": "#c7000b",
    "hygon": "#1d4e89",
    "cambricon": "#6b46c1",
    "amd": "#4a5568",
    "intel": "#0071c5",
}
TRACK_COLORS = {"source": "#76b900", "target": "#c7000b"}


def _layout(fig: go.Figure, *, y_title: str, height: int = 340, stack: bool = False) -> go.Figure:
    fig.update_layout(
        barmode="stack" if stack else None,
        height=height,
        margin={"l": 56, "r": 16, "t": 32, "b": 40},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font={"family": FONT_FAMILY, "size": 12, "color": "#1f2933"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
        xaxis={"title": None, "gridcolor": "#e4e7eb"},
        yaxis={"title": {"text": y_title}, "gridcolor": "#e4e7eb", "rangemode": "tozero"},
    )
    return fig


def vendor_share_figure(months: list[dict]) -> go.Figure:
    """Stacked bars per month: each vendor's share of compute-unit-hours (ledger), in %."""
    labels = [m["month"].strftime("%Y-%m") for m in months]
    vendors = sorted({v["vendor"] for m in months for v in m["vendors"]})
    fig = go.Figure()
    for vendor in vendors:
        rows = [next((v for v in m["vendors"] if v["vendor"] == vendor), None) for m in months]
        label = next(v["label"] for m in months for v in m["vendors"] if v["vendor"] == vendor)
        fig.add_trace(
            go.Bar(
                name=_plain(label),
                x=labels,
                # Plotly needs numbers; the table under the chart shows the exact Decimal figures.
                y=[float(r["share_pct"]) if r else 0.0 for r in rows],
                customdata=[[float(r["cu_hours"]) if r else 0.0] for r in rows],
                marker_color=VENDOR_COLORS.get(vendor),
                hovertemplate="%{x}<br>%{fullData.name}: <b>%{y:.2f} %</b> (%{customdata[0]:,.1f} CU·h)"
                "<extra></extra>",
            )
        )
    fig = _layout(fig, y_title=_("Share of CU-hours (%)"), stack=True)
    fig.update_layout(xaxis={"type": "category"}, yaxis={"range": [0, 100]}, bargap=0.35)
    return fig


def track_series_figure(
    series: dict[str, list[dict]], key: str, *, y_title: str, names: dict[str, str]
) -> go.Figure:
    """One line per track of an hourly series (requests/s, p99 or error rate)."""
    fig = go.Figure()
    for track in ("source", "target"):
        points = [p for p in series.get(track, []) if p[key] is not None]
        fig.add_trace(
            go.Scatter(
                name=_plain(names[track]),
                x=[p["hour"].isoformat() for p in points],
                y=[float(p[key]) if isinstance(p[key], Decimal) else p[key] for p in points],
                mode="lines",
                line={"color": TRACK_COLORS[track]},
                hovertemplate="%{x}<br>%{fullData.name}: <b>%{y:,.2f}</b><extra></extra>",
            )
        )
    return _layout(fig, y_title=y_title, height=260)
