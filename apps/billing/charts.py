"""Plotly figures of the billing pages (plotly.js is loaded by the page from our static files)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from apps.inventory.charts import FONT_FAMILY, _plain, figure_html

__all__ = ["cost_by_month_figure", "figure_html"]


def cost_by_month_figure(by_project: dict[str, dict[date, Decimal]], currency: str) -> go.Figure:
    """A stacked bar per month, one trace per project."""
    months = sorted({m for values in by_project.values() for m in values})
    labels = [m.strftime("%Y-%m") for m in months]
    fig = go.Figure()
    for project in sorted(by_project):
        values = by_project[project]
        fig.add_trace(
            go.Bar(
                name=_plain(project),
                x=labels,
                # Plotly needs numbers; the page's tables show the exact Decimal amounts.
                y=[float(values.get(m, Decimal(0))) for m in months],
                hovertemplate="%{x}<br>%{fullData.name}: <b>%{y:,.2f}</b> " + currency + "<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        height=340,
        margin={"l": 56, "r": 16, "t": 32, "b": 40},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font={"family": FONT_FAMILY, "size": 12, "color": "#1f2933"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
        xaxis={"title": None, "type": "category"},
        yaxis={"title": {"text": _("Cost (%(currency)s)") % {"currency": currency}}, "gridcolor": "#e4e7eb"},
        bargap=0.35,
    )
    return fig
