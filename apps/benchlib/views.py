"""The benchmark library page: profiles, what was measured where, and a recommendation form.

Mounted at /catalog/library/ (the catalog's sections). Any signed-in user reads it: measurements are
fleet data. Bad form input is shown as a message on the page, never a 500.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Max, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from apps.benchlib.models import Measurement
from apps.benchlib.recommend import RULES, profiles_summary, recommend, scaling_assumptions
from apps.catalog.models import DeviceModel, Vendor, WorkloadProfile
from apps.core.errors import ApplicationError
from apps.quotas.library import quota_ceiling


@login_required
@require_safe
def library(request: HttpRequest) -> HttpResponse:
    profiles = list(WorkloadProfile.objects.order_by("key"))
    coverage = (
        Measurement.objects.values("profile__key", "device_model__name")
        .annotate(n=Count("id"), newest=Max("measured_at"), synthetic=Count("id", filter=Q(synthetic=True)))
        .order_by("profile__key", "device_model__name")
    )
    answer, error = None, ""
    chosen = request.GET.get("profile", "")
    if chosen and request.GET.get("target"):
        try:
            answer = recommend(
                profile=chosen,
                target=request.GET.get("target"),
                latency_ms=request.GET.get("latency_ms") or None,
                vendors=request.GET.getlist("vendor"),
                user=request.user,
                quota_ceiling=quota_ceiling,
            )
        except ApplicationError as exc:
            error = exc.message
    context = {
        "profiles": profiles,
        "summary": profiles_summary(),
        "coverage": list(coverage),
        "answer": answer,
        "error": error,
        "chosen": chosen,
        "vendors": Vendor.choices,
        "chosen_vendors": request.GET.getlist("vendor"),
        "models_in_fleet": DeviceModel.objects.filter(devices__isnull=False).distinct().count(),
        "rules": RULES,
        "scaling_assumptions": scaling_assumptions(),
    }
    return render(request, "benchlib/library.html", context)
