from django.contrib.auth import views as auth_views
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET

from apps.core.throttling import login_rate_limited


def home(request: HttpRequest) -> HttpResponse:
    return redirect("inventory:fleet")


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        if login_rate_limited(request):
            return HttpResponse("Too many login attempts; try again in a minute.", status=429)
        return super().post(request, *args, **kwargs)


def admin_login(request: HttpRequest, extra_context=None) -> HttpResponse:
    """The admin's login view, behind the same rate limit as the site's."""
    from django.contrib import admin
    from django.contrib.admin import AdminSite

    if request.method == "POST" and login_rate_limited(request):
        return HttpResponse("Too many login attempts; try again in a minute.", status=429)
    return AdminSite.login(admin.site, request, extra_context=extra_context)
