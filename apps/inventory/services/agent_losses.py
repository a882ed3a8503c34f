"""Who may report a card lost (掉卡) with an agent token.

A full-inventory report that leaves out a card marks it LOST; a lost card takes no work and pages
staff. A token bound to a node (or a node pattern) speaks for the nodes it covers, so its silence
about a card counts. An unbound token (no pattern, or only "*") could be any machine of the cluster:
the demo shipped one, and its empty report for ``dev-ws-01`` marked that node's card lost (issue 27
§4). Such a token still registers new nodes (pending approval) and updates the nodes it reports
for, but a report that would mark cards lost on a node it did not register itself (staff, a ledger
import or cluster sync registered it, or another token) is a 403 and writes nothing.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from apps.core.errors import PermissionDenied
from apps.inventory.models import AgentToken, Device, Node


def check_agent_may_mark_lost(*, agent: AgentToken | None, node: Node, missing: list[Device]) -> None:
    """Refuse (403) an unbound agent token's report that would mark ``missing`` lost on a node the
    token did not register. Staff and commands (``agent`` None) and bound tokens pass."""
    if agent is None or not missing or not agent.is_unbound or node.registered_by_token_id == agent.pk:
        return
    message = _(
        "This agent token is bound to no node and did not register node %(node)s: its report "
        "would mark %(count)d card(s) lost (%(cards)s), which only a token bound to the node or "
        "staff may report. Nothing was written; bind the token to its node (admin → Inventory → "
        "Agent tokens)."
    ) % {
        "node": repr(node.name),
        "count": len(missing),
        "cards": ", ".join(f"#{d.index}" for d in missing[:8]) + ("…" if len(missing) > 8 else ""),
    }
    raise PermissionDenied(
        message,
        details={"node": node.name, "would_mark_lost": [d.index for d in missing]},
        code="agent_may_not_mark_lost",
    )
