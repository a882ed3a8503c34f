"""Node-agent tokens: only a SHA-256 of the key is stored; the key is returned once."""

from __future__ import annotations

from django.db import transaction

from apps.accounts.models import ApiToken
from apps.core.audit import change_record_create
from apps.inventory.models import AgentToken, Cluster

AGENT_KEY_PREFIX = "sca"  # TokenAuthentication treats "sca_..." keys as agent tokens


@transaction.atomic
def agent_token_create(*, cluster: Cluster, name: str, actor) -> tuple[AgentToken, str]:
    key = ApiToken.generate_key(AGENT_KEY_PREFIX)
    token = AgentToken(cluster=cluster, name=name, prefix=key[:12], key_hash=AgentToken.hash_key(key))
    token.full_clean()
    token.save()
    change_record_create(
        actor=actor,
        action="agent_token.create",
        obj=token,
        after={"cluster": cluster.slug, "name": name, "prefix": token.prefix},
    )
    return token, key


@transaction.atomic
def agent_token_revoke(*, token: AgentToken, actor) -> bool:
    """Revoke once; a second call changes nothing and returns False."""
    if not AgentToken.objects.filter(pk=token.pk, revoked=False).update(revoked=True):
        return False
    token.revoked = True
    change_record_create(
        actor=actor,
        action="agent_token.revoke",
        obj=token,
        before={"revoked": False},
        after={"revoked": True},
    )
    return True
