"""The history panel of the device and node pages (issue 29 §5) and the chart data it polls.

The inventory pages (web modules, which may import any app) call the panel functions directly; its charts are redrawn by ``static/js/history.js`` from
``/telemetry/devices/<pk>/history/`` and ``/telemetry/nodes/<pk>/history/`` every ``REFRESH_S`` seconds
while the tab is visible and the range ends now. A bad range is a 400 with the message (page and
data alike); a card or node the reader may not see is a 404.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, JsonResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from apps.core.errors import NotFound, ValidationFailed
from apps.core.formatting import chart_time, zone_name
from apps.inventory.charts import figure_html, figure_spec
from apps.telemetry import charts, history

CHART_KEYS = (*history.METRICS, "errors")


def _figures(report: dict) -> dict:
    figs = {metric: charts.history_metric_figure(report["lines"], metric) for metric in history.METRICS}
    figs["errors"] = charts.history_errors_figure(report["lines"], report["counters"], history.counter_label)
    rng = report["range"]
    # The whole range asked for, not only the windows that have data ("7 d" spans seven days).
    span = [chart_time(rng.start), chart_time(rng.end)]
    for fig in figs.values():
        if fig is not None:
            fig.update_xaxes(range=span)
    return figs


def _notes(report: dict) -> dict[str, list[str]]:
    notes = {
        metric: [
            _("%(card)s: not reported by %(exporter)s")
            % {"card": line["label"], "exporter": line["exporter"]}
            for line in lines
        ]
        for metric, lines in report["missing"].items()
    }
    if report["has_data"] and not report["counters"]:
        exporters = sorted(
            {line["exporter"] for line in report["lines"] if line["points"] and line["exporter"]}
        )
        notes["errors"] = [
            _("No error counters from %(exporter)s.") % {"exporter": ", ".join(exporters) or "?"}
        ]
    else:
        notes["errors"] = []
    return notes


def _resolution_text(report: dict) -> str:
    bucket = report["bucket"]
    if bucket < 3600:
        return _("One point per %(minutes)d-minute window; hollow points are estimated.") % {
            "minutes": bucket // 60
        }
    if bucket == 3600:
        return _("One point per hour; hollow points are estimated.")
    return _("One point per %(hours)d hours (hourly windows merged); hollow points are estimated.") % {
        "hours": bucket // 3600
    }


def _local_input(value) -> str:
    return timezone.localtime(value).strftime("%Y-%m-%dT%H:%M")


def _panel(request: HttpRequest, *, kind: str, obj, loader) -> dict:
    """The panel's HTML and status for a device or node page."""
    params = request.GET
    error = ""
    try:
        rng = history.history_range(params)
    except ValidationFailed as exc:
        error = exc.message
        rng = history.history_range({})
    report = loader(rng)
    figs = _figures(report)
    notes = _notes(report)
    prefix = f"history-{kind}"
    sections = [
        {
            "key": key,
            "title": charts.history_titles()[key],
            "div_id": f"{prefix}-{key}-chart",
            # Plotly escapes the data it embeds; card labels are stripped of markup (charts._plain).
            "chart": mark_safe(figure_html(figs[key], div_id=f"{prefix}-{key}-chart")) if figs[key] else "",  # noqa: S308
            "notes": notes[key],
        }
        for key in CHART_KEYS
    ]
    url_name = "telemetry:device-history" if kind == "device" else "telemetry:node-history"
    data_url = reverse(url_name, args=[obj.pk])
    query = params.copy()
    for key in list(query):
        if key not in ("range", "from", "to"):
            query.pop(key)
    if error:
        query = query.__class__(mutable=True)
    context = {
        "kind": kind,
        "error": error,
        "rng": rng,
        "presets": [(key, history.PRESET_LABELS[key]) for key in (*history.PRESETS, history.CUSTOM)],
        "custom_from": params.get("from") if error else _local_input(rng.start),
        "custom_to": params.get("to") if error else _local_input(rng.end),
        "zone": zone_name(),
        "sections": sections,
        "has_data": report["has_data"],
        "resolution_text": _resolution_text(report),
        "xid": report["xid"],
        "xid_more": report["xid_more"],
        "data_url": f"{data_url}?{query.urlencode()}" if query else data_url,
        "refresh_s": history.REFRESH_S if rng.live and not error else 0,
        "prefix": prefix,
    }
    html = render_to_string("telemetry/_history.html", context, request=request)
    return {"html": mark_safe(html), "status": 400 if error else 200}  # noqa: S308 - a template render


def device_history_panel(request: HttpRequest, device) -> dict:
    """The device page's history panel (``apps.inventory.views.device_detail``): ``{"html", "status"}``."""
    return _panel(
        request,
        kind="device",
        obj=device,
        loader=lambda rng: history.device_history(user=request.user, pk=device.pk, rng=rng),
    )


def node_history_panel(request: HttpRequest, node) -> dict:
    """The node page's history panel (``apps.inventory.views.node_detail``): ``{"html", "status"}``."""
    return _panel(
        request,
        kind="node",
        obj=node,
        loader=lambda rng: history.node_history(user=request.user, pk=node.pk, rng=rng),
    )


def _data(request: HttpRequest, loader) -> JsonResponse:
    try:
        rng = history.history_range(request.GET)
        report = loader(rng)
    except ValidationFailed as exc:
        return JsonResponse({"error": "invalid", "message": exc.message, "details": exc.details}, status=400)
    except NotFound:
        raise Http404 from None
    figs = _figures(report)
    notes = _notes(report)
    return JsonResponse(
        {
            "range": rng.preset,
            "start": rng.start.isoformat(),
            "end": rng.end.isoformat(),
            "resolution_s": report["resolution"],
            "bucket_s": report["bucket"],
            "resolution_text": _resolution_text(report),
            "has_data": report["has_data"],
            "charts": {key: figure_spec(figs[key]) if figs[key] else None for key in CHART_KEYS},
            "notes": notes,
            "lines": [
                {"label": line["label"], "device": line["device"], "points": len(line["points"])}
                for line in report["lines"]
            ],
        }
    )


@never_cache
@login_required
@require_safe
def device_history_data(request: HttpRequest, pk: int) -> JsonResponse:
    return _data(request, lambda rng: history.device_history(user=request.user, pk=pk, rng=rng))


@never_cache
@login_required
@require_safe
def node_history_data(request: HttpRequest, pk: int) -> JsonResponse:
    return _data(request, lambda rng: history.node_history(user=request.user, pk=pk, rng=rng))
