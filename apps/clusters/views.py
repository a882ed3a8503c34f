"""Cluster pages (staff): the list, one cluster with "Test connection" and "Sync now", create / edit.

Every write goes through a service (``apps.clusters.connect``, ``apps.clusters.sync``); network calls
happen outside any transaction. Members get the styled 403 page (``staff_required``), anonymous
visitors the sign-in page; a TLS failure is explained in words (``apps.clusters.tls``).
"""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.clusters.backends.errors import BackendError
from apps.clusters.connect import check_lines, cluster_connection_test, cluster_save
from apps.clusters.forms import CONNECTION_FIELDS, ClusterConnectionForm
from apps.clusters.health import ClusterHealth, cluster_health
from apps.clusters.sync import cluster_sync
from apps.clusters.tls import tls_failure, tls_lines
from apps.core.errors import ApplicationError
from apps.core.permissions import staff_required
from apps.inventory.models import Cluster, DeviceEvent


@staff_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    clusters = list(Cluster.objects.annotate(node_count=Count("nodes")).order_by("name"))
    health = cluster_health(c.pk for c in clusters)
    for cluster in clusters:
        cluster.health = health.get(cluster.pk) or ClusterHealth()
    return render(request, "clusters/cluster_list.html", {"clusters": clusters})


@staff_required
def cluster_detail(request: HttpRequest, slug: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.annotate(node_count=Count("nodes")), slug=slug)
    events = (
        DeviceEvent.objects.filter(node__cluster=cluster, after__has_key="drift")
        .select_related("node")
        .order_by("-created_at", "-id")[:30]
    )
    check = cluster.last_check if isinstance(cluster.last_check, dict) else {}
    lines = check_lines(check) if check else []
    tls = check.get("tls") if isinstance(check.get("tls"), dict) else None
    tls_text = tls_lines(tls) if tls else []
    return render(
        request,
        "clusters/cluster_detail.html",
        {
            "cluster": cluster,
            "health": cluster_health([cluster.pk]).get(cluster.pk) or ClusterHealth(),
            "check_lines": lines,
            # A TLS failure: explained above, its raw text in a details element (staff only page).
            "tls": tls,
            "tls_text": tls_text,
            "other_lines": [line for line in lines if line not in tls_text],
            "events": events,
        },
    )


def _form_errors(form: ClusterConnectionForm, error: ApplicationError) -> None:
    """A service's refusal on the fields it names (the rest above the form)."""
    details = error.details if isinstance(getattr(error, "details", None), dict) else {}
    placed = False
    for field, problems in details.items():
        if field in form.fields:
            for problem in problems if isinstance(problems, list | tuple) else [problems]:
                form.add_error(field, str(problem))
            placed = True
    if not placed or any(f not in form.fields for f in details):
        form.add_error(None, error.message)


def _edit(request: HttpRequest, cluster: Cluster | None) -> HttpResponse:
    form = ClusterConnectionForm(request.POST or None, request.FILES or None, instance=cluster)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data.get("kubeconfig_upload")
        fields = {f: form.cleaned_data[f] for f in CONNECTION_FIELDS}
        if upload:
            fields.pop("kubeconfig_path")
        try:
            saved = cluster_save(
                # the row as stored (the form has already copied its input onto its instance)
                cluster=Cluster.objects.get(pk=cluster.pk) if cluster is not None else None,
                fields=fields,
                kubeconfig=upload.read() if upload else None,
                actor=request.user,
            )
        except ApplicationError as e:
            _form_errors(form, e)
        else:
            messages.success(request, _("Cluster %(name)s saved.") % {"name": saved.name})
            return redirect("clusters:detail", slug=saved.slug)
    status = 400 if request.method == "POST" else 200
    return render(request, "clusters/cluster_form.html", {"form": form, "cluster": cluster}, status=status)


@staff_required
def cluster_create(request: HttpRequest) -> HttpResponse:
    return _edit(request, None)


@staff_required
def cluster_edit(request: HttpRequest, slug: str) -> HttpResponse:
    return _edit(request, get_object_or_404(Cluster, slug=slug))


@staff_required
@require_POST
def cluster_test(request: HttpRequest, slug: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, slug=slug)
    result = cluster_connection_test(cluster=cluster, actor=request.user)
    (messages.success if result["ok"] else messages.warning)(request, " ".join(result["lines"]))
    return redirect("clusters:detail", slug=slug)


@staff_required
@require_POST
def cluster_sync_now(request: HttpRequest, slug: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, slug=slug)
    try:
        report = cluster_sync(cluster=cluster, actor=request.user)
    except (ApplicationError, BackendError) as e:
        tls = tls_failure(e) if isinstance(e, BackendError) else None
        error = " ".join(tls_lines(tls)) if tls else e.message
        messages.error(request, _("Sync failed: %(error)s") % {"error": error})
    else:
        messages.success(
            request,
            _("Synced %(nodes)d nodes: %(created)d new, %(drift)d drift, %(events)d events.")
            % {
                "nodes": len(report.nodes),
                "created": len(report.created_nodes),
                "drift": len(report.drift),
                "events": report.events,
            },
        )
    return redirect("clusters:detail", slug=slug)
