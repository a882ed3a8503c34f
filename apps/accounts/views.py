"""Member self-service pages: the profile (language, time zone) and API tokens (create, expiry, revoke)."""

from __future__ import annotations

import zoneinfo

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts import services
from apps.accounts.expiry import parse_expiry
from apps.accounts.models import ApiToken, UserPreference
from apps.core.errors import ApplicationError, ValidationFailed

COMMON_ZONES = (
    "Asia/Shanghai",
    "Asia/Hong_Kong",
    "Asia/Singapore",
    "Asia/Tokyo",
    "Europe/London",
    "UTC",
    "America/New_York",
)


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def profile(request: HttpRequest) -> HttpResponse:
    pref = UserPreference.objects.filter(user=request.user).first()
    status = 200
    if request.method == "POST":
        try:
            pref = services.preference_set(
                user=request.user,
                language=request.POST.get("language", ""),
                time_zone=request.POST.get("time_zone", "").strip(),
                actor=request.user,
            )
        except ApplicationError as exc:
            messages.error(request, exc.message)
            status = 400
        else:
            messages.success(request, _("Preferences saved."))
            response = redirect("accounts:profile")
            if pref.language:  # the switcher's cookie would otherwise keep the old language
                response.set_cookie(settings.LANGUAGE_COOKIE_NAME, pref.language, samesite="Lax")
            else:
                response.delete_cookie(settings.LANGUAGE_COOKIE_NAME)
            return response
    context = {
        "pref": pref,
        "language_choices": settings.LANGUAGES,
        "zones": sorted(zoneinfo.available_timezones()),
        "common_zones": COMMON_ZONES,
        "platform_zone": settings.TIME_ZONE,
        "current_zone": timezone.get_current_timezone_name(),
    }
    return render(request, "accounts/profile.html", context, status=status)


@login_required
@never_cache  # the page shows a new key once: no browser or proxy may keep a copy
@require_http_methods(["GET", "HEAD", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    key = None
    status = 200
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        try:
            expires_at = parse_expiry(request.POST.get("expires_on", ""), field="expires_on")
            if not name:
                raise ValidationFailed(_("Give the token a name, e.g. the script that uses it."))
            _token, key = services.api_token_create(
                user=request.user, name=name[:100], expires_at=expires_at, actor=request.user
            )
        except ApplicationError as exc:
            messages.error(request, exc.message)
            status = 400
    context = _tokens_context(request)
    context["new_key"] = key
    return render(request, "accounts/tokens.html", context, status=status)


def _tokens_context(request) -> dict:
    return {
        "tokens": ApiToken.objects.filter(user=request.user).order_by("-created_at"),
        "now": timezone.now(),
    }


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = ApiToken.objects.filter(user=request.user, pk=pk).first()
    if token is None:
        raise Http404
    services.api_token_revoke(token=token, actor=request.user)
    messages.success(request, _("Token %(name)s revoked.") % {"name": token.name})
    return redirect("accounts:tokens")
