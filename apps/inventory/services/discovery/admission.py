"""Admission of nodes an agent registered: staff approval, or a cluster sync that sees the node."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.audit import actor_fields, change_record_create
from apps.core.errors import PermissionDenied
from apps.inventory.models import (
    Cluster,
    DeviceEvent,
    Node,
)
from apps.inventory.services.discovery.common import (
    APPROVED_VIA,
    NODE_APPROVED,
    VIA_CLUSTER_SYNC,
    VIA_STAFF,
)
from apps.inventory.services.ledger.events import device_event_create


@transaction.atomic
def node_approve(*, node: Node, actor, via: str = VIA_STAFF) -> Node:
    """Admit a node pending approval: from now on it takes work. Idempotent (an approved node is
    returned unchanged, with no event). Staff call it (admin action, API); ``via`` says who
    confirmed the node, e.g. "cluster sync" when Kubernetes lists it."""
    if getattr(actor, "is_agent", False):
        raise PermissionDenied(_("A node agent may not approve nodes."))
    locked = Node.objects.select_for_update().get(pk=node.pk)
    if not Node.objects.filter(pk=locked.pk, pending_approval=True).update(
        pending_approval=False, updated_at=timezone.now()
    ):
        return locked
    locked.pending_approval = False
    actor_label = actor_fields(actor)["actor_label"]
    device_event_create(
        node=locked,
        kind=DeviceEvent.Kind.STATUS_CHANGED,
        message=NODE_APPROVED % {"node": locked.name, "via": via, "actor": actor_label},
        before={"pending_approval": True},
        after={"pending_approval": False},
        actor_label=actor_label,
    )
    change_record_create(
        actor=actor,
        action="node.approve",
        obj=locked,
        before={"pending_approval": True},
        after={"pending_approval": False},
        message=APPROVED_VIA % {"via": via},
    )
    return locked


def node_confirm_in_cluster(*, cluster: Cluster, node_names, actor="cluster-sync") -> list[Node]:
    """The hook for cluster sync: Kubernetes lists these nodes, so the pending nodes of the same
    names in ``cluster`` are real and are approved. Returns the nodes it approved."""
    names = set(node_names)
    pending = Node.objects.filter(cluster=cluster, pending_approval=True, name__in=names).order_by("pk")
    return [node_approve(node=node, actor=actor, via=VIA_CLUSTER_SYNC) for node in pending]
