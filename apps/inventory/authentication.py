"""Node-agent authentication: ``Authorization: Token sca_<key>`` (inventory.AgentToken).

An agent token authenticates as an AgentPrincipal that may only post node reports for its cluster.
Listed first in REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]; keys without the agent prefix are
left to apps.accounts.authentication.TokenAuthentication.

DRF: https://www.django-rest-framework.org/api-guide/authentication/#custom-authentication
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions

from apps.accounts.authentication import HeaderKeyAuthentication, is_agent_key
from apps.inventory.models import AgentToken


class AgentPrincipal:
    """The identity of a node agent. Not a user: it has no projects and no staff rights."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False
    is_anonymous = False
    is_agent = True

    def __init__(self, token: AgentToken) -> None:
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


class AgentTokenAuthentication(HeaderKeyAuthentication):
    """A node agent's token: authenticates as its AgentPrincipal while the token is unrevoked."""

    def authenticate(self, request):
        key = self.header_key(request)
        if key is None or not is_agent_key(key):
            return None
        agent = (
            AgentToken.objects.select_related("cluster")
            .filter(key_hash=AgentToken.hash_key(key), revoked=False)
            .first()
        )
        if agent is None:
            raise exceptions.AuthenticationFailed(_("Invalid or revoked agent token."))
        AgentToken.objects.filter(pk=agent.pk).update(last_used_at=timezone.now())
        return (AgentPrincipal(agent), agent)
