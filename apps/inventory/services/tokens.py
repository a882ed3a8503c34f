"""Node-agent tokens: only a SHA-256 of the key is stored; the key is returned once."""

from __future__ import annotations

from django.db import transaction

from apps.accounts.authentication import AGENT_KEY_PREFIX
from apps.accounts.models import ApiToken
from apps.core.audit import change_record_create
from apps.core.validation import validate_and_save
from apps.inventory.models import AgentToken, Cluster


@transaction.atomic
def agent_token_create(
    *, cluster: Cluster, name: str, actor, node_pattern: str = ""
) -> tuple[AgentToken, str]:
    """A token for the agent of one node (``node_pattern`` "gpu-a01"), of the nodes a pattern
    matches ("gpu-a*"), or, with no pattern, of any node of the cluster (new nodes arrive pending)."""
    key = ApiToken.generate_key(AGENT_KEY_PREFIX)
    token = AgentToken(
        cluster=cluster,
        name=name,
        node_pattern=node_pattern.strip(),
        prefix=key[:12],
        key_hash=AgentToken.hash_key(key),
    )
    validate_and_save(token, what="agent token")
    change_record_create(
        actor=actor,
        action="agent_token.create",
        obj=token,
        after={
            "cluster": cluster.slug,
            "name": name,
            "prefix": token.prefix,
            "node_pattern": token.node_pattern,
        },
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
