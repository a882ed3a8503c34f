"""The ledger's events page (issue 29 §5): every event the reader may see, filtered by node, kind
(the operation) and severity, grouped per node or per operation, paged on the server.

Visibility is ``selectors.device_event_list``'s (a member sees the events of the nodes and cards they
see). A node filter naming a node the reader does not see finds nothing, exactly like a name that
does not exist. Bad input (an unknown kind, severity or grouping, a page that is not a whole number)
is a 400 that says what to fix.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, F, Max, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_safe

from apps.inventory import selectors
from apps.inventory.models import DeviceEvent, Node

GROUP_PAGE_SIZE = 20
EVENT_PAGE_SIZE = 50
# The newest events shown in each group; the group's link filters the list down to it.
EVENTS_PER_GROUP = 5
GROUPINGS = {
    "node": gettext_lazy("per node"),
    "kind": gettext_lazy("per operation"),
    "none": gettext_lazy("no grouping (newest first)"),
}
DEFAULT_GROUPING = "node"


class EventFilterInvalid(ValueError):
    pass


def _choice(params, name: str, choices, label: str) -> str:
    value = (params.get(name) or "").strip()
    if value and value not in dict(choices):
        raise EventFilterInvalid(
            _("%(field)s: unknown value %(value)s; choose one of: %(choices)s.")
            % {"field": label, "value": repr(value[:40]), "choices": ", ".join(str(k) for k, _l in choices)}
        )
    return value


def event_filters(params) -> dict:
    """The filters ``params`` asks for; EventFilterInvalid with a message when one is malformed."""
    kind = _choice(params, "kind", DeviceEvent.Kind.choices, _("Kind"))
    severity = _choice(params, "severity", DeviceEvent.Severity.choices, _("Severity"))
    group = _choice(params, "group", list(GROUPINGS.items()), _("Grouping")) or DEFAULT_GROUPING
    node = (params.get("node") or "").strip()[:200]
    raw_page = (params.get("page") or "1").strip()
    if not raw_page.isdigit() or int(raw_page) < 1 or len(raw_page) > 9:
        raise EventFilterInvalid(
            _("page: give a whole number from 1, not %(value)s.") % {"value": repr(raw_page[:20])}
        )
    return {"kind": kind, "severity": severity, "group": group, "node": node, "page": int(raw_page)}


def filtered_events(*, user, filters: dict) -> QuerySet[DeviceEvent]:
    qs = selectors.device_event_list(user=user)
    if filters["node"]:
        qs = qs.filter(node__name__iexact=filters["node"])
    if filters["kind"]:
        qs = qs.filter(kind=filters["kind"])
    if filters["severity"]:
        qs = qs.filter(severity=filters["severity"])
    return qs


def _page(paginator: Paginator, number: int):
    # Past the last page: the last page (a list that shrank between two clicks), never an error.
    return paginator.page(min(number, paginator.num_pages or 1))


def grouped_events(*, user, filters: dict) -> dict:
    """The page of groups (or of events, ungrouped) the filters ask for."""
    qs = filtered_events(user=user, filters=filters)
    group = filters["group"]
    if group == "none":
        page = _page(Paginator(qs.select_related("node", "device"), EVENT_PAGE_SIZE), filters["page"])
        return {"page": page, "groups": [], "events": list(page.object_list)}
    key = "node_id" if group == "node" else "kind"
    summary = (
        qs.order_by()
        .values(key)
        .annotate(
            count=Count("id"),
            last=Max("created_at"),
            critical=Count("id", filter=Q(severity=DeviceEvent.Severity.CRITICAL)),
            warning=Count("id", filter=Q(severity=DeviceEvent.Severity.WARNING)),
        )
        .order_by("-last", key)
    )
    page = _page(Paginator(summary, GROUP_PAGE_SIZE), filters["page"])
    rows = list(page.object_list)
    values = [row[key] for row in rows]
    newest = (
        qs.filter(**{f"{key}__in": values})
        .annotate(
            rank=Window(RowNumber(), partition_by=[F(key)], order_by=[F("created_at").desc(), F("id").desc()])
        )
        .filter(rank__lte=EVENTS_PER_GROUP)
        .select_related("node", "device")
        .order_by("-created_at", "-id")
    )
    by_value: dict = {}
    for event in newest:
        by_value.setdefault(getattr(event, key), []).append(event)
    other = "kind" if key == "node_id" else "node_id"
    breakdown: dict = {}
    for row in qs.filter(**{f"{key}__in": values}).order_by().values(key, other).annotate(n=Count("id")):
        breakdown.setdefault(row[key], []).append((row[other], row["n"]))
    nodes = Node.objects.in_bulk(
        {row[key] for row in rows}
        if key == "node_id"
        else {n for items in breakdown.values() for n, _c in items}
    )
    kinds = dict(DeviceEvent.Kind.choices)
    groups = []
    for row in rows:
        value = row[key]
        parts = sorted(breakdown.get(value, []), key=lambda item: -item[1])
        if key == "node_id":
            node = nodes.get(value)
            title, node_name, kind = (node.name if node else "?"), (node.name if node else ""), ""
            parts_shown = [
                {"label": kinds.get(k, k), "count": n, "kind": k, "node": node_name} for k, n in parts
            ]
        else:
            title, node_name, kind = kinds.get(value, value), "", value
            parts_shown = [
                {
                    "label": nodes[n].name if n in nodes else "?",
                    "count": n_count,
                    "kind": value,
                    "node": nodes[n].name if n in nodes else "",
                }
                for n, n_count in parts
            ]
        groups.append(
            {
                "title": title,
                "node": nodes.get(value) if key == "node_id" else None,
                "node_name": node_name,
                "kind": kind,
                "count": row["count"],
                "critical": row["critical"],
                "warning": row["warning"],
                "last": row["last"],
                "parts": parts_shown,
                "events": by_value.get(value, []),
                "more": max(0, row["count"] - EVENTS_PER_GROUP),
            }
        )
    return {"page": page, "groups": groups, "events": []}


def _query(params, **extra) -> str:
    query = params.copy()
    query.pop("page", None)
    for k, v in extra.items():
        if v in (None, ""):
            query.pop(k, None)
        else:
            query[k] = v
    return query.urlencode()


@login_required
@require_safe
def event_list(request: HttpRequest) -> HttpResponse:
    error = ""
    status = 200
    try:
        filters = event_filters(request.GET)
    except EventFilterInvalid as exc:
        error, status = str(exc), 400
        filters = event_filters({})
    result = grouped_events(user=request.user, filters=filters)
    context = {
        "filters": filters,
        "error": error,
        "kinds": DeviceEvent.Kind.choices,
        "severities": DeviceEvent.Severity.choices,
        "groupings": list(GROUPINGS.items()),
        "page": result["page"],
        "groups": result["groups"],
        "events": result["events"],
        "page_query": _query(request.GET) if not error else "",
    }
    return render(request, "inventory/events.html", context, status=status)
