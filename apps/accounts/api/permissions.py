"""Who may manage API tokens through the API.

A token is made by a signed-in person only. A request authenticated by an API token may list the
caller's tokens (names, prefixes and dates; never a key) and revoke the token it was made with, but it
may neither create a token nor revoke another one: otherwise a token expiring tomorrow could mint one
that never expires and outlives its revocation (issue 27 §4), and a stolen key could lock its owner
out by revoking the rest. Sessions (the token page, the browsable API) and the admin are unaffected.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework.permissions import SAFE_METHODS, BasePermission

from apps.accounts.models import ApiToken


def token_of(request) -> ApiToken | None:
    """The API token a request was authenticated with, or None (a session, an agent, anonymous)."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiToken) else None


class MintsNoTokens(BasePermission):
    """Token writes need a signed-in session; a token may only read the list and revoke itself."""

    def has_permission(self, request, view) -> bool:
        token = token_of(request)
        if token is None or request.method in SAFE_METHODS:
            return True
        if getattr(view, "action", None) == "destroy":
            if str(view.kwargs.get(view.lookup_url_kwarg or view.lookup_field)) == str(token.pk):
                return True
            self.message = _(
                "A request authenticated by an API token may revoke only that token; sign in to "
                "revoke other tokens (Account → API tokens)."
            )
            return False
        self.message = _(
            "API tokens are created only by a signed-in person (Account → API tokens), not by a "
            "request authenticated by an API token."
        )
        return False
