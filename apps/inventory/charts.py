"""Plotly figures for the ledger pages.

Figures are built with ``plotly.graph_objects`` and rendered as a ``<div>`` plus a JSON data block
that ``static/js/charts.js`` draws: the page loads plotly.js once, from our own static files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import plotly.graph_objects as go
from django.utils.html import escape
from django.utils.translation import gettext as _

from apps.catalog.models import Vendor
from apps.core.formatting import as_local, chart_time, zone_name
from apps.inventory.models import Device

# Health states shown on the fleet overview (retired cards are out of service and not counted).
HEALTH_ORDER: tuple[str, ...] = (Device.Health.HEALTHY, Device.Health.DEGRADED, Device.Health.LOST)
HEALTH_COLORS: dict[str, str] = {
    Device.Health.HEALTHY: "#2f855a",
    Device.Health.DEGRADED: "#d69e2e",
    Device.Health.LOST: "#c53030",
}
FONT_FAMILY = (
    'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, '
    '"PingFang SC", "Microsoft YaHei", "Noto Sans CJK SC", sans-serif'
)


@dataclass
class ModelRow:
    """Cards of one vendor / model, counted by health."""

    vendor: str
    model: str
    unrecognized: bool
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def vendor_label(self) -> str:
        return str(Vendor(self.vendor).label) if self.vendor in Vendor.values else self.vendor

    @property
    def label(self) -> str:
        return f"{self.vendor_label} {self.model}"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def healthy(self) -> int:
        return self.counts.get(Device.Health.HEALTHY, 0)

    @property
    def degraded(self) -> int:
        return self.counts.get(Device.Health.DEGRADED, 0)

    @property
    def lost(self) -> int:
        return self.counts.get(Device.Health.LOST, 0)


def model_rows(by_model: Iterable[dict]) -> list[ModelRow]:
    """Fold ``fleet_summary()["by_model"]`` into one row per vendor / model.

    Recognised cards group under the catalog name; unrecognised ones under the raw name the tool
    printed (flagged), so two raw spellings of one catalog model collapse into one row.
    """
    rows: dict[tuple[str, str, bool], ModelRow] = {}
    for item in by_model:
        catalog_name = item.get("device_model__name")
        unrecognized = not catalog_name
        model = catalog_name or item.get("raw_model_name") or "?"
        key = (item["vendor"], model, unrecognized)
        row = rows.get(key)
        if row is None:
            row = rows[key] = ModelRow(vendor=item["vendor"], model=model, unrecognized=unrecognized)
        row.counts[item["health"]] = row.counts.get(item["health"], 0) + item["count"]
    return sorted(rows.values(), key=lambda r: (r.vendor_label.lower(), r.model.lower(), r.unrecognized))


def _plain(text: str) -> str:
    return text.replace("<", "‹").replace(">", "›")


def _shorten(text: str, limit: int = 15) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def cards_by_model_figure(rows: list[ModelRow]) -> go.Figure:
    """A stacked bar per vendor / model, one colour per health state."""
    # Plotly reads a small subset of HTML in labels; raw model names come from node reports.
    labels, ticks = [], []
    for row in rows:
        vendor, model = _plain(row.vendor_label), _plain(row.model)
        mark = " (?)" if row.unrecognized else ""
        labels.append(f"{vendor}<br>{model}{mark}")
        # Long raw names would collide under their bars: ticks are shortened, the hover keeps them whole.
        ticks.append(f"{vendor}<br>{_shorten(model)}{mark}")
    fig = go.Figure()
    for health in HEALTH_ORDER:
        fig.add_trace(
            go.Bar(
                name=str(Device.Health(health).label),
                x=labels,
                y=[row.counts.get(health, 0) for row in rows],
                marker_color=HEALTH_COLORS[health],
                hovertemplate="%{x}<br>%{fullData.name}: <b>%{y}</b><extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        height=360,
        margin={"l": 48, "r": 16, "t": 32, "b": 56},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font={"family": FONT_FAMILY, "size": 12, "color": "#1f2933"},
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "xanchor": "left",
            "x": 0,
            "traceorder": "normal",
        },
        xaxis={
            "title": None,
            "automargin": True,
            "tickmode": "array",
            "tickvals": labels,
            "ticktext": ticks,
        },
        yaxis={
            "title": {"text": _("Cards")},
            "gridcolor": "#e4e7eb",
            "rangemode": "tozero",
            "tickformat": "d",
        },
        bargap=0.35,
    )
    return fig


# The escapes of django.utils.html.json_script: the JSON cannot end its <script> element.
_JSON_SCRIPT_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}


# A chart whose time axis holds one instant gets this much on either side (plotly would otherwise
# zoom to a millisecond: "08:39:59.999 … 08:40:00.0005").
SINGLE_POINT_PAD = timedelta(minutes=30)


def _time_values(values) -> list | None:
    """The values of a trace's coordinate as chart times, or None when they are not times."""
    if values is None or isinstance(values, str):
        return None
    items = list(values)
    if not items or not any(isinstance(as_local(v), datetime) for v in items):
        return None
    return [chart_time(v) for v in items]


def localize_times(fig: go.Figure) -> go.Figure:
    """Every time on ``fig``'s axes in the current zone (the platform's unless the user's is active),
    the time axes titled with that zone, dates printed as ISO digits in every language, and an axis of
    a single instant widened to an hour."""
    zone = zone_name()
    axes: dict[str, set[str]] = {}
    for trace in fig.data:
        for coord in ("x", "y"):
            if coord not in trace:
                continue
            converted = _time_values(trace[coord])
            if converted is None:
                continue
            trace[coord] = converted
            axis_ref = trace[f"{coord}axis"] if f"{coord}axis" in trace else None  # noqa: SIM401 - plotly traces have no .get
            name = (axis_ref or coord).replace("x", "xaxis").replace("y", "yaxis")
            axes.setdefault(name, set()).update(v for v in converted if v)
    for name, instants in axes.items():
        axis: dict = {"type": "date", "tickformat": "%m-%d %H:%M", "hoverformat": "%Y-%m-%d %H:%M"}
        if fig.layout[name].showticklabels is not False:  # a shared axis is titled once, at the bottom
            axis["title"] = {"text": _("Time (%(zone)s)") % {"zone": zone}}
        if len(instants) == 1 and fig.layout[name].range is None:  # a range the figure set stays
            (only,) = instants
            at = datetime.fromisoformat(only)
            axis["range"] = [
                (at - SINGLE_POINT_PAD).isoformat(sep=" "),
                (at + SINGLE_POINT_PAD).isoformat(sep=" "),
            ]
        fig.layout[name].update(axis)
    return fig


def figure_spec(fig: go.Figure) -> dict:
    """What ``static/js/charts.js`` draws: the figure (times in the current zone), its config and
    height. Also the body of the JSON a page polls to redraw a chart (static/js/history.js)."""
    localize_times(fig)
    return {
        "figure": json.loads(fig.to_json()),
        "config": {
            "displaylogo": False,
            "responsive": True,
            "modeBarButtonsToRemove": ["lasso2d", "select2d"],
        },
        # The box is as tall as the figure: a taller layout would spill over the next card.
        "height": f"{int(fig.layout.height)}px" if fig.layout.height else "360px",
    }


def figure_html(fig: go.Figure, *, div_id: str) -> str:
    """The figure as an empty ``<div>`` and its data in a ``<script type="application/json">``.

    ``static/js/charts.js`` draws it with the plotly.js the page loads from our static files. No inline
    script or style: the site's Content-Security-Policy refuses them, and a JSON data block is not
    executed, so ``script-src`` does not apply to it (W3C CSP3 §6.1.2; HTML "data block").
    Like Django's ``json_script``, ``<``, ``>`` and ``&`` are escaped so no text can close the block.
    """
    payload = json.dumps(figure_spec(fig), separators=(",", ":")).translate(_JSON_SCRIPT_ESCAPES)
    div = escape(div_id)
    return (
        f'<div id="{div}" class="plotly-graph-div" data-plotly-chart></div>'
        f'<script type="application/json" data-plotly-figure="{div}">{payload}</script>'
    )
