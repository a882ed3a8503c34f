"""Platform staff: one test, one guard for services and one for pages.

Staff is Django's ``is_staff`` flag on a signed-in user (DESIGN "accounts": staff see all). Node
agents authenticate with a token and are never staff (``AgentUser.is_staff`` is False).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.translation import gettext as _

from apps.core.errors import PermissionDenied


def user_is_staff(user: Any) -> bool:
    """True for a signed-in platform staff user; False for anonymous users, agents and labels."""
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_staff", False))


def require_staff(actor: Any, *, message: str | None = None) -> None:
    """For services: raise ``PermissionDenied`` (403) unless ``actor`` is platform staff. A label
    (``"demo-loader"``, ``"command"``, a worker's name) is an internal caller and passes; ``None`` is
    no one and does not."""
    if isinstance(actor, str):
        return
    if not user_is_staff(actor):
        raise PermissionDenied(message or _("Only platform staff may do this."))


def staff_required(
    view: Callable[..., HttpResponse] | None = None, *, hide: bool = False
) -> Callable[..., HttpResponse]:
    """For page views: sign-in first (the login redirect), then platform staff only. Anyone else gets
    403 Forbidden (Django's ``PermissionDenied``), or 404 with ``hide=True`` for consoles whose
    existence is not shown to non-staff. Use as ``@staff_required`` or ``@staff_required(hide=True)``."""

    def decorate(func: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(func)
        @login_required
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not user_is_staff(request.user):
                if hide:
                    raise Http404
                raise DjangoPermissionDenied(_("This page is for platform staff only."))
            return func(request, *args, **kwargs)

        return wrapped

    return decorate(view) if view is not None else decorate
