"""Server-rendered ledger pages: fleet overview, nodes, devices.

Every read goes through ``apps.inventory.selectors`` (scoped by membership); an object the user
cannot see is a 404, never a 403, so a page does not confirm that it exists.
"""

from __future__ import annotations

from collections import defaultdict

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from apps.accounts.selectors import is_platform_staff, user_project_ids
from apps.core import live as live_sections
from apps.core.errors import ApplicationError, InvalidTransition
from apps.core.filters import page_filter
from apps.core.templatetags.suanchi import link_tone
from apps.inventory import charts, selectors
from apps.inventory.filtersets import DevicePageFilterSet, NodePageFilterSet
from apps.inventory.models import Device, DeviceLink, Node
from apps.inventory.services import ledger
from apps.scheduling.faults import node_status_change
from apps.telemetry.history_views import device_history_panel, node_history_panel

PAGE_SIZE = 50
FLEET_EVENT_COUNT = 20
NODE_EVENT_COUNT = 50
# The export endpoint belongs to the REST API; the page only links to it with its own filters.
DEVICE_EXPORT_PATH = "/api/inventory/devices/export/"
# The filters each page's bar shows (apps.core.filters.page_filter).
NODE_FILTERS = ("search", "cluster", "pool", "status", "vendor")
DEVICE_FILTERS = ("search", "vendor", "device_model", "health", "pool_status", "node", "unrecognized")


def _paginate(request: HttpRequest, qs: QuerySet) -> Page:
    return Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))


def _query_without_page(request: HttpRequest, **extra: str) -> str:
    query: QueryDict = request.GET.copy()
    query.pop("page", None)
    for key, value in extra.items():
        query[key] = value
    return query.urlencode()


# The fleet page's live sections (issue 29 §2): name → template partial, rendered by the page and
# again by fleet-live for static/js/live.js. The headline counts are live fields (_fleet_counts).
FLEET_SECTIONS = {
    "fleet-vendors": "inventory/_fleet_vendors.html",
    "fleet-models": "inventory/_fleet_models.html",
    "fleet-events": "inventory/_fleet_events.html",
}


def _fleet_context(user) -> dict:
    summary = selectors.fleet_summary(user=user)
    rows = charts.model_rows(summary["by_model"])
    health = {row["health"]: row["count"] for row in summary["by_health"]}
    node_status = {row["status"]: row["count"] for row in summary["by_node_status"]}
    return {
        "summary": summary,
        "model_rows": rows,
        "health_counts": [
            (value, label, health.get(value, 0))
            for value, label in Device.Health.choices
            if value != Device.Health.RETIRED
        ],
        "healthy_count": health.get(Device.Health.HEALTHY, 0),
        "degraded_count": health.get(Device.Health.DEGRADED, 0),
        "lost_count": health.get(Device.Health.LOST, 0),
        "node_status_counts": [
            (value, label, node_status.get(value, 0))
            for value, label in Node.Status.choices
            if value != Node.Status.RETIRED
        ],
        "events": selectors.device_event_list(user=user)[:FLEET_EVENT_COUNT],
    }


@login_required
@require_safe
def fleet(request: HttpRequest) -> HttpResponse:
    user = request.user
    context = _fleet_context(user)
    rows = context["model_rows"]
    chart_html = ""
    if rows:
        figure = charts.cards_by_model_figure(rows)
        # Plotly escapes the data it embeds ("<" → \u003c) and labels are stripped of markup.
        chart_html = mark_safe(charts.figure_html(figure, div_id="fleet-cards-chart"))  # noqa: S308
    context.update(
        {
            "chart_html": chart_html,
            "is_platform_staff": is_platform_staff(user),
            "has_projects": bool(user_project_ids(user)),
        }
    )
    context["sections"] = {
        name.removeprefix("fleet-"): live_sections.page_section(
            live_sections.render_section(request, template, context)
        )
        for name, template in FLEET_SECTIONS.items()
    }
    return render(request, "inventory/fleet.html", context)


def _fleet_counts(user) -> dict[str, int]:
    summary = selectors.fleet_summary(user=user)
    health = {row["health"]: row["count"] for row in summary["by_health"]}
    counts = {
        "fleet-nodes": summary["node_total"],
        "fleet-cards": summary["device_total"],
        "fleet-healthy": health.get(Device.Health.HEALTHY, 0),
        "fleet-degraded": health.get(Device.Health.DEGRADED, 0),
        "fleet-lost": health.get(Device.Health.LOST, 0),
        "fleet-unrecognized": summary["unrecognized"],
    }
    node_status = {row["status"]: row["count"] for row in summary["by_node_status"]}
    for value, _label in Node.Status.choices:
        if value != Node.Status.RETIRED:
            counts[f"fleet-nodes-{value}"] = node_status.get(value, 0)
    return counts


@never_cache
@login_required
@require_safe
def fleet_live(request: HttpRequest) -> JsonResponse:
    """The fleet page's headline counts for ``static/js/live.js`` (issue 21: live pages) and, asked
    with ``?sections=fleet-models,…``, its sections (issue 29 §2; ``apps.core.live``), scoped to what
    the reader may see like the page."""
    try:
        names = live_sections.requested_sections(request)
    except live_sections.SectionsInvalid:
        return live_sections.sections_invalid_response()
    fields = {key: {"text": str(value), "value": value} for key, value in _fleet_counts(request.user).items()}
    body: dict = {"fields": fields}
    wanted = [name for name in names if name in FLEET_SECTIONS]
    if wanted:
        context = _fleet_context(request.user)
        body["sections"] = {
            name: live_sections.render_section(request, FLEET_SECTIONS[name], context) for name in wanted
        }
    return JsonResponse(body)


def _card_models_by_node(user, node_ids: list[int]) -> dict[int, list[dict]]:
    """Visible, in-service cards on the given nodes, grouped by model: one query for a whole page."""
    grouped = (
        selectors.device_list(user=user)
        .exclude(health=Device.Health.RETIRED)
        .filter(node_id__in=node_ids)
        .order_by()
        .values("node_id", "vendor", "device_model__name", "raw_model_name")
        .annotate(count=Count("pk"))
    )
    models: dict[int, dict[tuple, dict]] = defaultdict(dict)
    for row in grouped:
        name = row["device_model__name"] or row["raw_model_name"] or "?"
        key = (row["vendor"], name, not row["device_model__name"])
        entry = models[row["node_id"]].setdefault(
            key, {"name": name, "unrecognized": not row["device_model__name"], "count": 0}
        )
        entry["count"] += row["count"]
    return {
        node_id: sorted(entries.values(), key=lambda e: (-e["count"], e["name"]))
        for node_id, entries in models.items()
    }


@login_required
@require_safe
def node_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    filterset, form = page_filter(
        NodePageFilterSet, request, selectors.node_list(user=user), fields=NODE_FILTERS
    )
    card_count = (
        selectors.device_list(user=user)
        .exclude(health=Device.Health.RETIRED)
        .filter(node=OuterRef("pk"))
        .order_by()
        .values("node")
        .annotate(n=Count("pk"))
        .values("n")
    )
    nodes = filterset.qs.annotate(
        card_count=Coalesce(Subquery(card_count, output_field=IntegerField()), Value(0))
    )
    page = _paginate(request, nodes)
    card_models = _card_models_by_node(user, [node.pk for node in page.object_list])
    for node in page.object_list:
        node.card_models = card_models.get(node.pk, [])
    context = {"form": form, "page": page, "page_query": _query_without_page(request)}
    return render(request, "inventory/node_list.html", context)


def _topology(devices: list[Device], links) -> dict:
    """A device × device matrix: the link between each pair, "X" on the diagonal, None when unknown."""
    by_pair = {}
    for link in links:
        by_pair[(link.device_a_id, link.device_b_id)] = link
        by_pair.setdefault((link.device_b_id, link.device_a_id), link)
    rows = []
    for a in devices:
        cells = []
        for b in devices:
            if a.pk == b.pk:
                cells.append({"self": True})
            else:
                cells.append({"link": by_pair.get((a.pk, b.pk)), "peer": b})
        rows.append({"device": a, "cells": cells})
    kinds_present = {link.kind for link in by_pair.values()}
    return {"rows": rows, "has_links": bool(by_pair), "kinds_present": kinds_present}


def _node_detail_context(request: HttpRequest, node: Node) -> dict:
    user = request.user
    devices = list(node.devices.all())
    links = list(selectors.device_link_list(user=user, node=node))
    events = selectors.device_event_list(user=user).filter(node=node)[:NODE_EVENT_COUNT]
    in_service = [d for d in devices if d.health != Device.Health.RETIRED]
    staff = is_platform_staff(user)
    return {
        "node": node,
        "devices": devices,
        "in_service_count": len(in_service),
        "topology": _topology(in_service, links),
        "link_legend": _link_legend(),
        "events": events,
        "taints": [t for t in node.taints if isinstance(t, dict)],
        "rdma_nics": [n for n in node.rdma_nics if isinstance(n, dict)],
        "is_platform_staff": staff,
        "node_actions": _node_actions(node, in_service) if staff else [],
        "reason_max_length": NodeActionForm.REASON_MAX_LENGTH,
    }


@login_required
@require_safe
def node_detail(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(selectors.node_detail_queryset(user=request.user), pk=pk)
    context = _node_detail_context(request, node)
    # The metric history (telemetry's panel; a web module may import it); a bad range is a 400.
    panel = node_history_panel(request, node)
    context["history"] = panel.get("html", "")
    return render(request, "inventory/node_detail.html", context, status=panel.get("status", 200))


# --------------------------------------------------------------------------------------------------
# staff actions on a node (the same ledger services as the Django admin's actions)

NODE_ACTIONS: dict[str, tuple[str, str]] = {
    # action: (button label, what it does, shown before the click)
    "maintenance_on": (
        gettext_lazy("Maintenance on"),
        gettext_lazy("No new work is placed on the node; running jobs continue."),
    ),
    "maintenance_off": (
        gettext_lazy("Maintenance off"),
        gettext_lazy("The node goes back to ready and takes new work."),
    ),
    "cordon": (
        gettext_lazy("Cordon all cards"),
        gettext_lazy("No new allocations on the node's cards; running work continues."),
    ),
    "uncordon": (
        gettext_lazy("Lift cordon"),
        gettext_lazy("The node's cards take new allocations again."),
    ),
    "quarantine": (
        gettext_lazy("Quarantine"),
        gettext_lazy("Jobs on the node are moved away and nothing new is placed on it."),
    ),
    "release": (
        gettext_lazy("Release from quarantine"),
        gettext_lazy("The node goes back to ready and takes new work."),
    ),
}


class NodeActionForm(forms.Form):
    """One staff action on a node; every action needs a reason, recorded in the ledger history."""

    REASON_MAX_LENGTH = 300  # Node.status_reason / Device.cordon_reason

    action = forms.ChoiceField(choices=[(key, label) for key, (label, _hint) in NODE_ACTIONS.items()])
    reason = forms.CharField(max_length=REASON_MAX_LENGTH, strip=True)


def _node_actions(node: Node, in_service: list[Device]) -> list[dict]:
    """The actions that make sense for the node's current state, in a stable order."""
    S = Node.Status
    available = {
        "maintenance_on": node.status in (S.READY, S.DRAINING),
        "maintenance_off": node.status == S.MAINTENANCE,
        "cordon": node.status != S.RETIRED and any(not d.cordoned for d in in_service),
        "uncordon": any(d.cordoned for d in in_service),
        "quarantine": node.status in (S.READY, S.DRAINING, S.MAINTENANCE),
        "release": node.status == S.QUARANTINED,
    }
    return [
        {"key": key, "label": label, "hint": hint}
        for key, (label, hint) in NODE_ACTIONS.items()
        if available[key]
    ]


def _require_status(node: Node, status: str, action_label: str) -> None:
    if node.status != status:
        raise InvalidTransition(
            _("Node %(node)s is %(status)s: “%(action)s” does not apply.")
            % {"node": node.name, "status": node.get_status_display(), "action": action_label},
            details={"status": node.status},
        )


@transaction.atomic
def _run_node_action(*, node: Node, action: str, reason: str, actor) -> None:
    S = Node.Status
    label = str(NODE_ACTIONS[action][0])
    if action == "maintenance_on":
        node_status_change(node=node, status=S.MAINTENANCE, reason=reason, actor=actor)
    elif action == "maintenance_off":
        _require_status(node, S.MAINTENANCE, label)
        node_status_change(node=node, status=S.READY, reason=reason, actor=actor)
    elif action == "quarantine":
        node_status_change(node=node, status=S.QUARANTINED, reason=reason, actor=actor)
    elif action == "release":
        _require_status(node, S.QUARANTINED, label)
        node_status_change(node=node, status=S.READY, reason=reason, actor=actor)
    else:
        cordoned = action == "cordon"
        devices = list(
            Device.objects.filter(node=node, cordoned=not cordoned)
            .exclude(health=Device.Health.RETIRED)
            .order_by("vendor", "index")
        )
        if not devices:
            raise InvalidTransition(
                _("Node %(node)s has no card to which “%(action)s” applies.")
                % {"node": node.name, "action": label}
            )
        for device in devices:
            ledger.device_cordon(device=device, cordoned=cordoned, reason=reason, actor=actor)


@login_required
@require_POST
def node_action(request: HttpRequest, pk: int) -> HttpResponse:
    """POST a staff action (maintenance on/off, cordon/uncordon, quarantine/release) with a reason.

    Members get a 403 page saying why; a missing reason or an unknown action is a 400 and a move the
    node's state machine refuses is a 409, both re-rendering the page with the error next to the form.
    """
    node = get_object_or_404(selectors.node_detail_queryset(user=request.user), pk=pk)
    if not is_platform_staff(request.user):
        raise PermissionDenied(_("Changing a node's state is for platform staff only."))
    form = NodeActionForm(request.POST)
    status = 400
    if form.is_valid():
        action = form.cleaned_data["action"]
        try:
            _run_node_action(node=node, action=action, reason=form.cleaned_data["reason"], actor=request.user)
        except ApplicationError as exc:
            form.add_error(None, exc.message)
            status = exc.status_code
        else:
            messages.success(
                request,
                _("%(action)s: done for node %(node)s.")
                % {"action": NODE_ACTIONS[action][0], "node": node.name},
            )
            return redirect("inventory:node-detail", pk=node.pk)
    node.refresh_from_db()
    context = _node_detail_context(request, node)
    context["action_form"] = form
    context["action_failed"] = request.POST.get("action", "")
    return render(request, "inventory/node_detail.html", context, status=status)


def _link_legend() -> list[tuple[str, str, str]]:
    """(css tone, example cell, meaning) from the closest link to the farthest."""
    examples = {"NV": "NV#"}
    legend = [
        (link_tone(value), examples.get(value, value), label) for value, label in DeviceLink.Kind.choices
    ]
    return sorted(legend, key=lambda item: item[0])


@login_required
@require_safe
def device_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    filterset, form = page_filter(
        DevicePageFilterSet, request, selectors.device_list(user=user), fields=DEVICE_FILTERS
    )
    devices = filterset.qs
    page = _paginate(request, devices)
    context = {
        "form": form,
        "page": page,
        "page_query": _query_without_page(request),
        "export_csv_url": f"{DEVICE_EXPORT_PATH}?{_query_without_page(request, format='csv')}",
        "export_xlsx_url": f"{DEVICE_EXPORT_PATH}?{_query_without_page(request, format='xlsx')}",
    }
    return render(request, "inventory/device_list.html", context)


@login_required
@require_safe
def device_detail(request: HttpRequest, pk: int) -> HttpResponse:
    user = request.user
    device = get_object_or_404(selectors.device_list(user=user), pk=pk)
    events = selectors.device_event_list(user=user).filter(device=device)
    links = (
        selectors.device_link_list(user=user, node=device.node)
        .filter(Q(device_a=device) | Q(device_b=device))
        .select_related("device_a__device_model", "device_b__device_model")
    )
    peers = []
    for link in links.order_by("device_a__index", "device_b__index"):
        peer = link.device_b if link.device_a_id == device.pk else link.device_a
        peers.append({"peer": peer, "link": link})
    peers.sort(key=lambda item: (item["peer"].vendor, item["peer"].index))
    context = {"device": device, "events": events, "peers": peers}
    # The metric history (telemetry's panel; a web module may import it); a bad range is a 400.
    panel = device_history_panel(request, device)
    context["history"] = panel.get("html", "")
    return render(request, "inventory/device_detail.html", context, status=panel.get("status", 200))
