"""Who may report what (see ``apps.inventory.services.discovery``): the node a report is for, the
agent token's scope, the vendor and identity checks, and the cards an agent may not move (CONFLICT)."""

from __future__ import annotations

from django.utils.translation import gettext as _

from apps.core.errors import NotFound, PermissionDenied, ValidationFailed
from apps.inventory.models import (
    AgentToken,
    Cluster,
    Device,
    DeviceEvent,
    Node,
    node_name_problem,
)
from apps.inventory.services.discovery.common import (
    CARD_CONFLICT,
    CONFLICT_EVENT_WINDOW,
    NODE_PENDING,
    NOT_COVERED,
    ON_OTHER_CLUSTER,
    IngestResult,
    _Recorder,
)
from apps.inventory.services.ledger.nodes import node_register
from apps.inventory.vendors.base import ParsedDevice, ParsedReport


def _agent_token(actor) -> AgentToken | None:
    """The agent token behind an actor (``AgentPrincipal``), or None for staff, commands, workers."""
    if getattr(actor, "is_agent", False):
        return actor.token
    return None


def _check_node_name(node_name: str) -> None:
    problem = node_name_problem(node_name)
    if problem is not None:
        raise ValidationFailed(problem, details={"node": [problem]})


def _check_agent_scope(*, agent: AgentToken, node_name: str, cluster: Cluster | None) -> None:
    if cluster is not None and cluster.pk != agent.cluster_id:
        raise PermissionDenied(
            _("This agent token belongs to cluster %(mine)s, not %(other)s.")
            % {"mine": repr(agent.cluster.slug), "other": repr(cluster.slug)}
        )
    if not agent.covers(node_name):
        raise PermissionDenied(
            _(
                "This agent token reports only for nodes matching %(pattern)s; it may not report "
                "for node %(node)s. Nothing was written."
            )
            % {"pattern": repr(agent.node_pattern), "node": repr(node_name)},
            details={"node": node_name, "node_pattern": agent.node_pattern},
        )


def _resolve_node(
    *, node_name: str, cluster: Cluster | None, agent: AgentToken | None = None
) -> tuple[Node, bool]:
    qs = Node.objects.select_for_update().filter(name=node_name)
    if cluster is not None:
        qs = qs.filter(cluster=cluster)
    nodes = list(qs[:2])
    if len(nodes) > 1:
        raise ValidationFailed(
            f"Node name {node_name!r} exists in several clusters; say which cluster.",
            details={"cluster": ["required: the node name is ambiguous"]},
        )
    if nodes:
        return nodes[0], False
    if cluster is None:
        raise NotFound(
            f"Unknown node {node_name!r}: register it first, or give its cluster to register it now."
        )
    # Its registration event is written with the report's other events (they link the report).
    node, _cards = node_register(
        cluster=cluster,
        name=node_name,
        values={
            "status": Node.Status.READY,
            "pending_approval": agent is not None,
            "registered_by_token": agent,
            "last_report_at": None,
        },
    )
    return node, True


def _check_vendor(node: Node, parsed: ParsedReport, kind: str) -> None:
    """A report must come from the node's vendor: an AMD rocm-smi report for a Hygon node is refused."""
    vendors = set(
        Device.objects.filter(node=node)
        .exclude(health=Device.Health.RETIRED)
        .values_list("vendor", flat=True)
    )
    if vendors and parsed.vendor not in vendors:
        message = _(
            "A %(kind)s report describes %(vendor)s cards, but node %(node)s holds %(held)s cards; "
            "the report was refused and nothing was written."
        ) % {"kind": kind, "vendor": parsed.vendor, "node": node.name, "held": ", ".join(sorted(vendors))}
        raise ValidationFailed(message, details={"kind": [message]}, code="vendor_mismatch")


def _check_identity(pairs: list[tuple[ParsedDevice, Device | None]], kind: str) -> None:
    """A card the ledger does not know needs some identity: a UUID, serial, PCIe bus id, model or memory."""
    anonymous = [
        p.index
        for p, device in pairs
        if device is None
        and not (p.uuid or p.serial or p.pci_bus_id or p.model_name or p.pci_device_id or p.memory_mib)
    ]
    if anonymous:
        message = _(
            "The %(kind)s report lists device(s) %(indices)s with no identity at all (no UUID, serial, "
            "PCIe bus id, model or memory): they cannot be registered; nothing was written."
        ) % {"kind": kind, "indices": ", ".join(f"#{i}" for i in anonymous)}
        raise ValidationFailed(message, details={"devices": anonymous}, code="device_without_identity")


def _agent_may_take(*, agent: AgentToken, node: Node, source: Node) -> str | None:
    """Why an agent's report may not move a card from ``source`` onto ``node`` (None: it may)."""
    if source.cluster_id != node.cluster_id:
        return ON_OTHER_CLUSTER % {"source": source.name, "cluster": source.cluster.slug}
    if not agent.covers(source.name):
        return NOT_COVERED % {"source": source.name}
    if node.pending_approval:
        return NODE_PENDING % {"source": source.name, "node": node.name}
    return None


def _record_conflicts(
    *,
    agent: AgentToken,
    node: Node,
    elsewhere: list[Device],
    rec: _Recorder,
    result: IngestResult,
    now,
) -> set[str]:
    """Split off the cards an agent may not move here: one CONFLICT event each. Returns their UUIDs."""
    if not elsewhere:
        return set()
    sources = Node.objects.select_related("cluster").in_bulk({d.node_id for d in elsewhere})
    recent = set(
        DeviceEvent.objects.filter(
            node=node,
            kind=DeviceEvent.Kind.CONFLICT,
            device__in=[d.pk for d in elsewhere],
            created_at__gte=now - CONFLICT_EVENT_WINDOW,
        ).values_list("device_id", flat=True)
    )
    refused: set[str] = set()
    for device in elsewhere:
        source = sources[device.node_id]
        why = _agent_may_take(agent=agent, node=node, source=source)
        if why is None:
            continue
        refused.add(device.uuid)
        result.conflicts += 1
        result.warnings.append(
            f"card {device.uuid} was not moved to {node.name}: {why}; staff have been told"
        )
        if device.pk in recent:
            continue
        rec.add(
            DeviceEvent.Kind.CONFLICT,
            CARD_CONFLICT
            % {"node": node.name, "cluster": node.cluster.slug, "card": device.uuid, "why": why},
            device=device,
            severity=DeviceEvent.Severity.CRITICAL,
            before={"node": source.name, "cluster": source.cluster.slug},
            after={"reported_by_node": node.name, "cluster": node.cluster.slug, "agent_token": agent.pk},
        )
    return refused
