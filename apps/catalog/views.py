"""Server-rendered catalog pages: device models, compute templates (算力模板) and request templates.

Catalog data is public spec data: any signed-in user may read it. Writes (the template editor,
retiring, importing request templates) are for platform staff and go through the services.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from apps.accounts.selectors import is_platform_staff
from apps.catalog import request_spec, selectors, services
from apps.catalog.filtersets import ComputeTemplatePageFilterSet, DeviceModelPageFilterSet
from apps.catalog.forms import ComputeTemplateForm, RequestTemplateImportForm
from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel
from apps.catalog.partitions import ProfileError, partition_profile, partition_profiles
from apps.core.errors import ApplicationError
from apps.core.filters import page_filter
from apps.core.permissions import staff_required

PAGE_SIZE = 50
# The filters each page's bar shows (apps.core.filters.page_filter).
MODEL_FILTERS = ("search", "vendor", "kind", "feature")
TEMPLATE_FILTERS = ("vendor", "device_model", "isolation", "partition", "retired")
REQUEST_TEMPLATES_ON_LIST = 50


def _paginate(request: HttpRequest, qs, size: int = PAGE_SIZE) -> Page:
    return Paginator(qs, size).get_page(request.GET.get("page"))


def _query_without_page(request: HttpRequest) -> str:
    query: QueryDict = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


# ------------------------------------------------------------------ device models


@login_required
@require_safe
def model_list(request: HttpRequest) -> HttpResponse:
    filterset, form = page_filter(
        DeviceModelPageFilterSet, request, selectors.device_model_catalog_list(), fields=MODEL_FILTERS
    )
    models = filterset.qs.order_by("vendor", "name")
    page = _paginate(request, models, 100)
    basis_labels = dict(ComputeCoefficient.Basis.choices)
    for model in page.object_list:
        model.coefficient_basis_label = basis_labels.get(model.current_coefficient_basis or "", "")
    context = {"form": form, "page": page, "page_query": _query_without_page(request)}
    return render(request, "catalog/model_list.html", context)


# ------------------------------------------------------------------ compute templates


@login_required
@require_safe
def template_list(request: HttpRequest) -> HttpResponse:
    filterset, form = page_filter(
        ComputeTemplatePageFilterSet, request, selectors.compute_template_list(), fields=TEMPLATE_FILTERS
    )
    templates = filterset.qs
    page = _paginate(request, templates)
    for template in page.object_list:
        template.cu = template.compute_units(template.current_coefficient)
    request_templates = list(selectors.request_template_list()[:REQUEST_TEMPLATES_ON_LIST])
    context = {
        "form": form,
        "page": page,
        "page_query": _query_without_page(request),
        "request_templates": request_templates,
        "import_form": RequestTemplateImportForm() if is_platform_staff(request.user) else None,
        "is_platform_staff": is_platform_staff(request.user),
    }
    return render(request, "catalog/template_list.html", context)


def _profile_basis(template: ComputeTemplate) -> str:
    if not template.partition_profile:
        return ""
    try:
        return selectors.profile_basis(partition_profile(template.device_model, template.partition_profile))
    except ProfileError as exc:
        return str(exc)


@login_required
@require_safe
def template_detail(request: HttpRequest, pk: int) -> HttpResponse:
    template = get_object_or_404(selectors.compute_template_list(), pk=pk)
    document = selectors.template_describe(template)
    context = {
        "template": template,
        "cu": template.compute_units(template.current_coefficient),
        "cu_per_card": document["status"]["computeUnitsPerCard"],
        "profile_basis": _profile_basis(template),
        "yaml_text": selectors.template_render(document, "yaml"),
        "is_platform_staff": is_platform_staff(request.user),
        "can_edit": is_platform_staff(request.user) and not template.is_builtin and not template.is_retired,
    }
    return render(request, "catalog/template_detail.html", context)


def _editor_catalog() -> dict[str, Any]:
    """What the editor's script needs per device model: memory and partition profiles."""
    data: dict[str, Any] = {}
    for model in DeviceModel.objects.order_by("vendor", "name"):
        profiles = []
        for profile in partition_profiles(model):
            if isinstance(profile, ProfileError):
                continue
            profiles.append(
                {
                    "name": profile.name,
                    "kind": profile.kind,
                    "memory_gib": None if profile.memory_mib is None else profile.memory_mib // 1024,
                    "share": str(profile.compute_share),
                    "max_instances": profile.default_instances,
                }
            )
        data[str(model.pk)] = {
            "name": model.name,
            "memory_gib": None if model.memory_mib is None else model.memory_mib // 1024,
            "profiles": profiles,
        }
    return data


def _editor(request: HttpRequest, *, template: ComputeTemplate | None) -> HttpResponse:
    """The template editor; its views are staff only."""
    if request.method == "POST":
        form = ComputeTemplateForm(request.POST)
        if form.is_valid():
            try:
                if template is None:
                    saved = services.compute_template_create(actor=request.user, **form.service_values())
                    messages.success(request, _("Compute template %(name)s created.") % {"name": saved.name})
                else:
                    saved = services.compute_template_update(
                        template=template, actor=request.user, **form.service_values()
                    )
                    messages.success(request, _("Compute template %(name)s saved.") % {"name": saved.name})
                return redirect("catalog:template-detail", pk=saved.pk)
            except ApplicationError as exc:
                form.add_service_errors(exc.details)
                if not form.errors:
                    form.add_error(None, exc.message)
    else:
        initial: dict[str, Any] = {}
        if template is not None:
            initial = ComputeTemplateForm.initial_from(template)
        elif request.GET.get("from", "").isdigit():
            source = (
                ComputeTemplate.objects.select_related("device_model").filter(pk=request.GET["from"]).first()
            )
            if source is not None:
                initial = ComputeTemplateForm.initial_from(source, copy=True)
        elif request.GET.get("device_model", "").isdigit():
            initial = {"device_model": request.GET["device_model"]}
        form = ComputeTemplateForm(initial=initial)
    context = {
        "form": form,
        "template": template,
        "editor_catalog": _editor_catalog(),
        "preview_url": reverse("compute-template-preview"),
    }
    return render(request, "catalog/template_form.html", context)


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def template_create(request: HttpRequest) -> HttpResponse:
    return _editor(request, template=None)


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def template_edit(request: HttpRequest, pk: int) -> HttpResponse:
    template = get_object_or_404(ComputeTemplate.objects.select_related("device_model"), pk=pk)
    if template.is_builtin or template.is_retired:
        messages.warning(
            request,
            _("Built-in and retired templates are read-only: copy it into a new template instead."),
        )
        return redirect("catalog:template-detail", pk=template.pk)
    return _editor(request, template=template)


@staff_required
@require_POST
def template_retire(request: HttpRequest, pk: int) -> HttpResponse:
    template = get_object_or_404(ComputeTemplate, pk=pk)
    services.compute_template_retire(
        template=template, actor=request.user, reason=request.POST.get("reason", "")
    )
    messages.success(request, _("Compute template %(name)s retired.") % {"name": template.name})
    return redirect("catalog:template-detail", pk=template.pk)


# ------------------------------------------------------------------ request templates


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def request_template_import(request: HttpRequest) -> HttpResponse:
    error = None
    if request.method == "POST":
        form = RequestTemplateImportForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                template, warnings = services.request_template_import(
                    text=form.cleaned_data["document"], actor=request.user
                )
            except ApplicationError as exc:
                error = exc
            else:
                outcome = getattr(template, "import_outcome", "updated")
                text = {
                    "created": _("Request template %(name)s imported."),
                    "updated": _("Request template %(name)s updated."),
                    "unchanged": _("Request template %(name)s is unchanged."),
                }[outcome] % {"name": template.name}
                messages.success(request, text)
                for warning in warnings:
                    messages.warning(request, warning)
                return redirect("catalog:request-template-detail", pk=template.pk)
    else:
        form = RequestTemplateImportForm()
    context = {"form": form, "error": error, "example": _EXAMPLE_DOCUMENT}
    return render(request, "catalog/request_template_import.html", context)


@login_required
@require_safe
def request_template_detail(request: HttpRequest, pk: int) -> HttpResponse:
    template = get_object_or_404(selectors.request_template_list(), pk=pk)
    rows = []
    for index, device in enumerate(template.devices):
        resolution = template.resolution[index] if index < len(template.resolution) else {}
        rows.append({"index": index, "device": device, "resolution": resolution})
    context = {
        "template": template,
        "rows": rows,
        "policy": template.topology_policy,
        "yaml_text": services.request_template_export(template),
        "is_platform_staff": is_platform_staff(request.user),
    }
    return render(request, "catalog/request_template_detail.html", context)


_EXAMPLE_DOCUMENT = request_spec.yaml_dump(
    request_spec.document_dict(
        api_version=request_spec.DEFAULT_API_VERSION,
        name="mixed-train-template",
        metadata={},
        spec={
            "devices": [
                {"type": "GPU", "model": "A100 80GB SXM4", "count": 1, "shared": False, "needs": ["RDMA"]},
                {"type": "NPU", "model": "Ascend 910B3", "count": 2, "shared": False, "needs": ["RDMA"]},
            ],
            "topologyPolicy": {"placement": "sameNode", "preferred": "sameSwitch"},
        },
    )
)
