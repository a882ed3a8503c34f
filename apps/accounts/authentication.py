"""Token authentication for the API: ``Authorization: Token <key>`` or ``Bearer <key>``.

User tokens authenticate as their user. Node-agent tokens (inventory.AgentToken, prefix ``sca_``)
authenticate as an AgentPrincipal that may only post node reports for its cluster.
"""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from apps.accounts.models import ApiToken


class AgentPrincipal:
    """The identity of a node agent. Not a user: it has no projects and no staff rights."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False
    is_anonymous = False
    is_agent = True

    def __init__(self, token) -> None:
        self.token = token
        self.cluster = token.cluster
        self.pk = None
        self.id = None

    def __str__(self) -> str:
        return f"agent:{self.cluster.slug}"

    def get_username(self) -> str:
        return str(self)

    def has_perm(self, *args, **kwargs) -> bool:
        return False


class TokenAuthentication(authentication.BaseAuthentication):
    keywords = ("token", "bearer")

    def authenticate_header(self, request) -> str:
        return "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode(errors="replace") not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: expected 'Token <key>'.")
        try:
            key = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token header: the key is not valid text.")
        key_hash = ApiToken.hash_key(key)
        if key.startswith("sca_"):
            from apps.inventory.models import AgentToken

            agent = (
                AgentToken.objects.select_related("cluster").filter(key_hash=key_hash, revoked=False).first()
            )
            if agent is None:
                raise exceptions.AuthenticationFailed("Invalid or revoked agent token.")
            AgentToken.objects.filter(pk=agent.pk).update(last_used_at=timezone.now())
            return (AgentPrincipal(agent), agent)
        token = ApiToken.objects.select_related("user").filter(key_hash=key_hash, revoked=False).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        if token.expires_at and token.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed("Token expired.")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return (token.user, token)
