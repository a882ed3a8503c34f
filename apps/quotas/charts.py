"""Plotly figures for the quota pages (rendered like ``apps.inventory.charts``: plotly.js is local)."""

from __future__ import annotations

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from apps.inventory.charts import FONT_FAMILY, figure_html

COLORS = {"guaranteed": "#2f855a", "borrowed": "#d69e2e", "idle": "#cbd5e0", "line": "#2b6cb0"}


def quota_bars_html(rows) -> str:
    """One stacked bar per project quota: guaranteed use, idle guarantee, borrowed on top."""
    if not rows:
        return ""
    labels = [f"{r.quota.project.slug} · {r.quota.class_label()}" for r in rows]
    used = [float(r.guaranteed_used) for r in rows]
    idle = [float(max(r.quota.guaranteed_cu - r.guaranteed_used, 0)) for r in rows]
    borrowed = [float(r.borrowed) for r in rows]
    fig = go.Figure()
    fig.add_bar(
        y=labels, x=used, name=_("used within guarantee"), orientation="h", marker_color=COLORS["guaranteed"]
    )
    fig.add_bar(y=labels, x=idle, name=_("idle guarantee"), orientation="h", marker_color=COLORS["idle"])
    fig.add_bar(y=labels, x=borrowed, name=_("borrowed"), orientation="h", marker_color=COLORS["borrowed"])
    fig.update_layout(
        barmode="stack",
        font={"family": FONT_FAMILY},
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
        xaxis_title=_("compute units"),
        legend={"orientation": "h", "y": -0.2},
        height=max(220, 40 * len(rows) + 100),
    )
    return figure_html(fig, div_id="quota-bars")


def history_html(points) -> str:
    if not points:
        return ""
    at = [p["at"] for p in points]
    fig = go.Figure()
    fig.add_scatter(
        x=at,
        y=[float(p["guaranteed"]) for p in points],
        name=_("guaranteed"),
        line={"dash": "dash", "color": COLORS["line"]},
    )
    fig.add_scatter(
        x=at,
        y=[float(p["used"]) for p in points],
        name=_("used"),
        fill="tozeroy",
        line={"color": COLORS["guaranteed"]},
    )
    fig.add_scatter(
        x=at, y=[float(p["borrowed"]) for p in points], name=_("borrowed"), line={"color": COLORS["borrowed"]}
    )
    fig.update_layout(
        font={"family": FONT_FAMILY},
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
        yaxis_title=_("compute units"),
        legend={"orientation": "h", "y": -0.2},
    )
    return figure_html(fig, div_id="quota-history")


def share_vs_use_html(rows) -> str:
    """The queue board's chart: per project, its fair share (guarantee ÷ all guarantees, %) next to
    its use (running CU ÷ all running CU, %). ``rows``: objects with ``project``, ``fair_share_pct``
    and ``use_pct`` (apps.scheduling.board.ProjectRow)."""
    rows = [r for r in rows if r.fair_share_pct is not None or r.use_pct is not None]
    if not rows:
        return ""
    labels = [r.project.slug for r in rows]
    fig = go.Figure()
    fig.add_bar(
        y=labels,
        x=[float(r.fair_share_pct or 0) for r in rows],
        name=_("fair share (guarantee ÷ all guarantees)"),
        orientation="h",
        marker_color=COLORS["line"],
    )
    fig.add_bar(
        y=labels,
        x=[float(r.use_pct or 0) for r in rows],
        name=_("use now (running ÷ all running)"),
        orientation="h",
        marker_color=COLORS["guaranteed"],
    )
    fig.update_layout(
        barmode="group",
        font={"family": FONT_FAMILY},
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
        xaxis={"title": {"text": _("share of the platform, in percent")}, "rangemode": "tozero"},
        yaxis={"autorange": "reversed"},
        legend={"orientation": "h", "y": -0.25},
        height=max(240, 56 * len(rows) + 120),
    )
    return figure_html(fig, div_id="board-share-chart")
