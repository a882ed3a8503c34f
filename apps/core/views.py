from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET

from apps.core.throttling import login_wait_seconds, record_login_failure


def home(request: HttpRequest) -> HttpResponse:
    return redirect("inventory:fleet")


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers and tools ask for whatever the page's ``<link rel="icon">``
    says: a permanent redirect to the static icon (so it is served, cached and hashed as the rest)."""
    from django.http import HttpResponsePermanentRedirect
    from django.templatetags.static import static

    return HttpResponsePermanentRedirect(static("img/favicon.svg"))


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def login_locked_out(request: HttpRequest, wait: int) -> HttpResponse:
    """429 with the login form and the real wait, also as ``Retry-After`` (RFC 9110 §10.2.3)."""
    message = ngettext(
        "Too many failed login attempts. Try again in %(seconds)d second.",
        "Too many failed login attempts. Try again in %(seconds)d seconds.",
        wait,
    ) % {"seconds": wait}
    response = render(
        request,
        "registration/login.html",
        {
            "form": AuthenticationForm(request),
            "lockout_message": message,
            "next": request.POST.get("next", ""),
        },
        status=429,
    )
    response["Retry-After"] = str(wait)
    return response


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        wait = login_wait_seconds(request)
        if wait:
            return login_locked_out(request, wait)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        # Only failures count toward the limit (apps/core/throttling.py); a successful login never does.
        record_login_failure(self.request)
        return super().form_invalid(form)


def admin_login(request: HttpRequest, extra_context=None) -> HttpResponse:
    """The admin's login view, behind the same rate limit as the site's."""
    from django.contrib import admin
    from django.contrib.admin import AdminSite

    if request.method == "POST":
        wait = login_wait_seconds(request)
        if wait:
            return login_locked_out(request, wait)
    response = AdminSite.login(admin.site, request, extra_context=extra_context)
    if request.method == "POST" and not request.user.is_authenticated:
        record_login_failure(request)
    return response


@require_GET
def run_progress_json(request: HttpRequest, pk: int) -> JsonResponse:
    """The progress of one background run, polled by static/js/run-progress.js. Only the user who
    asked for the run, or staff, may read it; anyone else (anonymous callers too, like every page
    route: tests/hardening/test_security.py) is told it does not exist."""
    from apps.core.errors import NotFound
    from apps.core.models import BackgroundRun
    from apps.core.runs import run_progress_read

    user = request.user
    run = BackgroundRun.objects.filter(pk=pk).first() if user.is_authenticated else None
    if run is None or not (user.is_staff or run.actor_id == user.pk):
        error = NotFound(_("No background run #%(id)d.") % {"id": pk})
        return JsonResponse({"error": error.as_dict()}, status=error.status_code)
    from apps.core.stored_text import localize

    progress = run_progress_read(run)
    progress["message"] = localize(progress["message"])  # a stored text, in the reader's language
    progress["error"] = localize(progress["error"])
    response = JsonResponse(progress)
    response["Cache-Control"] = "no-store"
    return response
