"""The notifications page: the user's subscriptions and those of the projects they administer, a form
to add one, and the delivery log. Bad input is a message on the page and nothing is written."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.models import Membership, Project
from apps.accounts.selectors import is_platform_staff
from apps.core.errors import ApplicationError
from apps.notify import services
from apps.notify.models import Delivery, Event, Subscription

LOG_ROWS = 50


def _managed_projects(user):
    if is_platform_staff(user):
        return Project.objects.order_by("slug")
    ids = Membership.objects.filter(user=user, role=Membership.Role.ADMIN).values("project_id")
    return Project.objects.filter(pk__in=ids).order_by("slug")


def _visible(user):
    return Subscription.objects.filter(Q(owner=user) | Q(project__in=_managed_projects(user))).select_related(
        "project", "owner"
    )


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def subscriptions(request: HttpRequest) -> HttpResponse:
    user = request.user
    projects = list(_managed_projects(user))
    created = None
    if request.method == "POST":
        project = None
        if request.POST.get("project"):
            project = next((p for p in projects if str(p.pk) == request.POST["project"]), None)
            if project is None:
                messages.error(request, _("You do not administer that project."))
                return redirect("notify:subscriptions")
        try:
            created = services.subscription_create(
                actor=user,
                channel=request.POST.get("channel", ""),
                target=request.POST.get("target", ""),
                events=request.POST.getlist("events"),
                project=project,
            )
        except ApplicationError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, _("Subscription added."))
    subs = list(_visible(user).order_by("-created_at"))
    log = Delivery.objects.filter(subscription__in=[s.pk for s in subs]).select_related("subscription")[
        :LOG_ROWS
    ]
    context = {
        "subscriptions": subs,
        "deliveries": log,
        "events": Event.choices,
        "channels": Subscription.Channel.choices,
        "projects": projects,
        "created": created,
        "post": request.POST if request.method == "POST" and created is None else {},
    }
    return render(
        request,
        "notify/subscriptions.html",
        context,
        status=400 if request.method == "POST" and created is None else 200,
    )


@login_required
@require_POST
def subscription_delete(request: HttpRequest, pk: int) -> HttpResponse:
    sub = _visible(request.user).filter(pk=pk).first()
    if sub is None:
        raise Http404
    try:
        services.subscription_delete(actor=request.user, subscription=sub)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Subscription removed."))
    return redirect("notify:subscriptions")
