"""Project middleware: no HTTP TRACE anywhere, and a Content-Security-Policy on every response."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponseNotAllowed, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.translation import gettext as _

# Function views cannot be asked which methods they take; these are the ones ours answer.
_FUNCTION_VIEW_METHODS = ("GET", "HEAD", "POST", "OPTIONS")


def _allowed_methods(path_info: str) -> list[str]:
    """The methods the view behind ``path_info`` answers, for the 405's ``Allow`` header."""
    try:
        func = resolve(path_info).func
    except Resolver404:
        return list(_FUNCTION_VIEW_METHODS)
    actions = getattr(func, "actions", None)  # a DRF ViewSet route: {"get": "list", "post": "create"}
    view_class = getattr(func, "view_class", None) or getattr(func, "cls", None)
    if actions:
        methods = {m.upper() for m in actions} | {"OPTIONS"}
    elif view_class is not None:
        methods = {m.upper() for m in view_class.http_method_names if m != "trace" and hasattr(view_class, m)}
    else:
        methods = set(_FUNCTION_VIEW_METHODS)
    if "GET" in methods:
        methods.add("HEAD")
    methods.discard("TRACE")
    return sorted(methods)


class TraceNotAllowedMiddleware:
    """Answer every HTTP TRACE with 405 before it reaches a view.

    TRACE echoes the request back (RFC 9110 §9.3.8) and is of no use to this application. DRF's
    ``APIView.dispatch`` routes a method to the view attribute of the same lower-case name, so a
    ``@action`` named ``trace`` once answered TRACE (a 500 with no pk); Django's ``View`` lists
    ``trace`` in ``http_method_names`` too. A 405 carries ``Allow`` (RFC 9110 §15.5.6).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method != "TRACE":
            return self.get_response(request)
        allowed = _allowed_methods(request.path_info)
        if request.path_info.startswith("/api/"):
            response = JsonResponse(
                {
                    "error": {
                        "code": "method_not_allowed",
                        "message": _('Method "%(method)s" not allowed.') % {"method": "TRACE"},
                    }
                },
                status=405,
            )
            response["Allow"] = ", ".join(allowed)
            return response
        return HttpResponseNotAllowed(allowed)


class ContentSecurityPolicyMiddleware:
    """Send ``settings.SUANCHI_CONTENT_SECURITY_POLICY`` as the ``Content-Security-Policy`` header.

    Django 5.2 has no built-in CSP (W3C Content Security Policy Level 3,
    https://www.w3.org/TR/CSP3/). Pages carry no inline script or style: page scripts are static
    files and chart data sits in ``<script type="application/json">`` blocks, which are not executed
    and so not subject to ``script-src``. A view that already set the header keeps its own.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = "; ".join(
            f"{directive} {' '.join(sources)}".strip()
            for directive, sources in settings.SUANCHI_CONTENT_SECURITY_POLICY.items()
        )

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        return response
