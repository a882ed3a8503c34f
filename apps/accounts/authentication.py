"""Token authentication for the API: ``Authorization: Token <key>`` or ``Bearer <key>``.

User tokens (accounts.ApiToken) authenticate as their user. Node-agent tokens (prefix ``sca_``) are
the inventory's: apps.inventory.authentication.AgentTokenAuthentication, listed before this class in
REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]. This class leaves agent keys alone.

DRF: https://www.django-rest-framework.org/api-guide/authentication/#custom-authentication
(return None to let the next class try, raise AuthenticationFailed to refuse; the first class's
``authenticate_header`` becomes the 401 response's WWW-Authenticate).
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions

from apps.accounts.models import ApiToken

# Node-agent keys are "sca_<random>" (ApiToken.generate_key(AGENT_KEY_PREFIX), issued by
# apps.inventory.services.tokens); user keys are "sc_<random>".
AGENT_KEY_PREFIX = "sca"


def is_agent_key(key: str) -> bool:
    return key.startswith(AGENT_KEY_PREFIX + "_")


class HeaderKeyAuthentication(authentication.BaseAuthentication):
    """The shared part: read the key from ``Authorization: Token|Bearer <key>``."""

    keywords = ("token", "bearer")

    def authenticate_header(self, request) -> str:
        return "Token"

    def header_key(self, request) -> str | None:
        """The key, or None when the header names no token scheme; a malformed header is refused."""
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Invalid token header: expected 'Token <key>'."))
        try:
            return header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed(_("Invalid token header: the key is not valid text."))


class TokenAuthentication(HeaderKeyAuthentication):
    """A user's API token: authenticates as that user while the token is unrevoked and unexpired."""

    def authenticate(self, request):
        key = self.header_key(request)
        if key is None or is_agent_key(key):
            return None
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=ApiToken.hash_key(key), revoked=False)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("Invalid or revoked token."))
        if token.expires_at and token.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed(_("Token expired."))
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return (token.user, token)
