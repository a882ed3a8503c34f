"""The notifications page: the user's subscriptions and those of the projects they administer, a form
to add one, and the delivery log. Bad input is a message on the page and nothing is written."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.models import Membership, Project
from apps.accounts.selectors import is_platform_staff
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.permissions import staff_required
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
                secret=request.POST.get("secret", ""),
                language=request.POST.get("language", ""),
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
        "message_languages": settings.LANGUAGES,
        "is_staff": is_platform_staff(user),
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


# ---------------------------------------------------------------------------- alert rules (staff)

OPEN_ALERT_ROWS = 200
RECENT_RESOLVED_ROWS = 50


def _float_or_raw(value: str):
    return (value or "").strip()


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def alerts(request: HttpRequest) -> HttpResponse:
    """Alert rules and the alerts they hold open (platform staff; others get the styled 403). A bad
    form is a message with status 400 and nothing written."""
    from apps.inventory.models import Cluster
    from apps.notify import alerts as alert_service
    from apps.notify.models import Alert, AlertRule

    created = None
    failed = False
    if request.method == "POST":
        post = request.POST
        project = cluster = None
        try:
            if post.get("project"):
                project = Project.objects.filter(pk=_int(post["project"])).first()
                if project is None:
                    raise ValidationFailed(_("No such project."), details={"project": ["unknown"]})
            if post.get("cluster"):
                cluster = Cluster.objects.filter(pk=_int(post["cluster"])).first()
                if cluster is None:
                    raise ValidationFailed(_("No such cluster."), details={"cluster": ["unknown"]})
            wanted = [_int(v) for v in post.getlist("subscriptions")]
            subs = list(Subscription.objects.filter(pk__in=wanted))
            if len(subs) != len(set(wanted)):
                raise ValidationFailed(_("No such subscription."), details={"subscriptions": ["unknown"]})
            created = alert_service.alert_rule_create(
                actor=request.user,
                name=post.get("name", ""),
                kind=post.get("kind", ""),
                threshold=_float_or_raw(post.get("threshold", "")),
                duration_s=_minutes(post.get("duration_min", "0"), "duration_min"),
                clear_margin=_float_or_raw(post.get("clear_margin", "0")) or 0,
                clear_duration_s=_minutes(post.get("clear_duration_min", "0"), "clear_duration_min"),
                project=project,
                cluster=cluster,
                subscriptions=subs,
            )
        except ApplicationError as exc:
            failed = True
            messages.error(request, exc.message)
        else:
            messages.success(request, _("Alert rule added."))
    context = {
        "rules": AlertRule.objects.select_related("project", "cluster").prefetch_related("subscriptions"),
        "open_alerts": Alert.objects.filter(state__in=[Alert.State.PENDING, Alert.State.FIRING])
        .select_related("rule", "project")
        .order_by("-state", "-since")[:OPEN_ALERT_ROWS],
        "resolved": Alert.objects.filter(state=Alert.State.RESOLVED)
        .select_related("rule")
        .order_by("-resolved_at")[:RECENT_RESOLVED_ROWS],
        "kinds": AlertRule.Kind.choices,
        "projects": Project.objects.order_by("slug"),
        "clusters": Cluster.objects.order_by("slug"),
        "subscriptions": Subscription.objects.select_related("project", "owner").order_by("-created_at"),
        "post": request.POST if failed else {},
        "created": created,
    }
    return render(request, "notify/alerts.html", context, status=400 if failed else 200)


@staff_required
@require_POST
def alert_rule_delete(request: HttpRequest, pk: int) -> HttpResponse:
    from apps.notify import alerts as alert_service
    from apps.notify.models import AlertRule

    rule = AlertRule.objects.filter(pk=pk).first()
    if rule is None:
        raise Http404
    alert_service.alert_rule_delete(actor=request.user, rule=rule)
    messages.success(request, _("Alert rule removed."))
    return redirect("notify:alerts")


def _int(value) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise ValidationFailed(_("%(value)s is not a number.") % {"value": str(value)[:40]}) from None


def _minutes(value, name: str) -> int:
    text = (value or "0").strip() or "0"
    try:
        minutes = float(text)
    except ValueError:
        raise ValidationFailed(
            _("%(field)s is a number of minutes.") % {"field": name}, details={name: ["not a number"]}
        ) from None
    if minutes != minutes or minutes < 0 or minutes > 30 * 24 * 60:
        raise ValidationFailed(
            _("%(field)s is from 0 to 43200 minutes (30 days).") % {"field": name},
            details={name: ["out of range"]},
        )
    return int(round(minutes * 60))
