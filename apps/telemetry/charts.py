"""Plotly figures for the telemetry pages (same pattern as apps/inventory/charts.py: plotly.js is
loaded once by the page from our static files; figures are a <div> plus an inline script)."""

from __future__ import annotations

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from apps.inventory.charts import FONT_FAMILY, _plain, figure_html  # noqa: F401 - re-exported

FIGURE_COLORS = ("#3b6ea5", "#2f855a", "#d69e2e")


def _figure(
    traces: list, *, y_title: str, height: int = 360, y_max: float | None = 100, **layout
) -> go.Figure:
    """A figure of ``traces`` in the pages' common layout (and ``layout`` more). Built whole, in one
    constructor: plotly validates a layout given at once some six times faster than through
    ``update_layout`` (issue 31: the fleet page's two charts took 30–80 ms)."""
    return go.Figure(
        data=traces,
        layout={
            **layout,
            "height": height,
            "margin": {"l": 56, "r": 16, "t": 32, "b": 48},
            "paper_bgcolor": "rgba(0,0,0,0)",
            "plot_bgcolor": "rgba(0,0,0,0)",
            "font": {"family": FONT_FAMILY, "size": 12, "color": "#1f2933"},
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
            "xaxis": {"gridcolor": "#e4e7eb"},
            "yaxis": {
                "title": {"text": y_title},
                "gridcolor": "#e4e7eb",
                "rangemode": "tozero",
                **({"range": [0, y_max]} if y_max else {}),
            },
        },
    )


def utilization_figure(series: list[dict]) -> go.Figure:
    """One line per group: average card busy % per window; estimated points are hollow markers."""
    traces = []
    for s in series:
        points = s["points"]
        traces.append(
            go.Scatter(
                name=_plain(s["group"]),
                x=[p["window_start"] for p in points],
                y=[p["utilization_pct"] for p in points],
                mode="lines+markers",
                marker={
                    "symbol": ["circle-open" if p["quality"] == "estimated" else "circle" for p in points],
                    "size": 5,
                },
                customdata=[[p["cards"], p["quality"]] for p in points],
                hovertemplate="%{x}<br>%{fullData.name}: <b>%{y:.1f} %</b> (%{customdata[0]} cards, %{customdata[1]})"
                "<extra></extra>",
            )
        )
    return _figure(traces, y_title=_("Card busy (%)"))


def figures_figure(figures: dict) -> go.Figure:
    """Seed 001 §4.1's three figures side by side."""
    names = [_("Allocation ratio"), _("Physical utilization"), _("Effective utilization")]
    keys = ("allocation_ratio", "physical_utilization", "effective_utilization")
    values = [figures[f"{k}_pct"] for k in keys]
    qualities = [figures[f"{k}_quality"] for k in keys]
    bars = go.Bar(
        x=names,
        y=[v if v is not None else 0 for v in values],
        marker_color=list(FIGURE_COLORS),
        text=[f"{v:.1f} %" if v is not None else "—" for v in values],
        textposition="outside",
        customdata=qualities,
        hovertemplate="%{x}: <b>%{y:.1f} %</b> (%{customdata})<extra></extra>",
    )
    return _figure([bars], y_title="%", height=320, y_max=110)


def curve_figure(points: list[dict], *, name: str) -> go.Figure:
    line = go.Scatter(
        name=_plain(name),
        x=[p["window_start"] for p in points],
        y=[p["utilization_pct"] for p in points],
        mode="lines+markers",
        marker={
            "symbol": ["circle-open" if p["quality"] == "estimated" else "circle" for p in points],
            "size": 5,
        },
        customdata=[[p["allocated_cards"], p["quality"]] for p in points],
        hovertemplate="%{x}<br><b>%{y:.1f} %</b> of %{customdata[0]} allocated cards (%{customdata[1]})<extra></extra>",
    )
    return _figure([line], y_title=_("Busy ÷ allocated (%)"))


# The job page's per-card curves (issue 21): metric -> (title, y axis range top or None).
CARD_METRIC_AXES = {
    "utilization": 100,
    "memory": None,
    "temperature": None,
    "power": None,
}
CARD_COLORS = ("#3b6ea5", "#2f855a", "#d69e2e", "#c53030", "#6b46c1", "#2c7a7b", "#b7791f", "#97266d")


def card_metric_titles() -> dict[str, str]:
    return {
        "utilization": _("Card busy (%)"),
        "memory": _("Memory used (MiB)"),
        "temperature": _("Temperature (°C)"),
        "power": _("Power (W)"),
    }


def _card_lines_figure(lines: list[dict], metric: str, *, height: int, marker_size: int) -> go.Figure | None:
    """One line per card (or partition) of ``lines`` for ``metric``; None when no line has a value.
    Points from estimated windows are hollow markers; a gap (no window) stays a gap."""
    traces = []
    for i, line in enumerate(lines):
        points = [p for p in line["points"] if p[metric] is not None]
        if not points:
            continue
        traces.append(
            go.Scatter(
                name=_plain(line["label"]),
                x=[p["window_start"] for p in points],
                y=[round(p[metric], 2) for p in points],
                mode="lines+markers",
                line={"color": CARD_COLORS[i % len(CARD_COLORS)]},
                marker={
                    "symbol": ["circle-open" if p["quality"] == "estimated" else "circle" for p in points],
                    "size": marker_size,
                },
                customdata=[p["quality"] for p in points],
                hovertemplate="%{x}<br>%{fullData.name}: <b>%{y}</b> (%{customdata})<extra></extra>",
            )
        )
    if not traces:
        return None
    return _figure(
        traces,
        y_title=card_metric_titles()[metric],
        height=height,
        y_max=CARD_METRIC_AXES[metric],
        showlegend=True,
    )


def card_metric_figure(cards: list[dict], metric: str) -> go.Figure | None:
    """One line per card for ``metric`` over the job's life (the job page)."""
    return _card_lines_figure(cards, metric, height=300, marker_size=5)


# -- a card's and a node's history (issue 29 §5) -------------------------------------------------


def history_titles() -> dict[str, str]:
    return {**card_metric_titles(), "errors": _("Error counter increases")}


def history_metric_figure(lines: list[dict], metric: str) -> go.Figure | None:
    """One line per card (or partition) for ``metric`` (a card's and a node's history)."""
    return _card_lines_figure(lines, metric, height=280, marker_size=4)


def history_errors_figure(lines: list[dict], counters: list[str], label) -> go.Figure | None:
    """The increase of each error counter per window, summed over the lines; None when the exporter
    gives no counter. A window with no increase is a zero bar (the counter was read)."""
    if not counters:
        return None
    traces = []
    for i, name in enumerate(counters):
        totals: dict = {}
        for line in lines:
            for p in line["points"]:
                if name in p["errors"]:
                    totals[p["window_start"]] = totals.get(p["window_start"], 0.0) + p["errors"][name]
        if not totals:
            continue
        times = sorted(totals)
        traces.append(
            go.Bar(
                name=_plain(label(name)),
                x=times,
                y=[totals[t] for t in times],
                marker_color=CARD_COLORS[i % len(CARD_COLORS)],
                hovertemplate="%{x}<br>%{fullData.name}: <b>+%{y}</b><extra></extra>",
            )
        )
    if not traces:
        return None
    top = max((max(trace.y) for trace in traces if trace.y), default=0)
    # All-zero bars would get an axis of −1…1 (issue 29 §3's soak chart): 0…1 instead.
    return _figure(
        traces,
        y_title=_("Increase per window"),
        height=260,
        y_max=None if top > 0 else 1,
        showlegend=True,
        barmode="group",
    )
