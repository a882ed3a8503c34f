"""Discovery: a node report (raw SMI output) becomes ledger truth.

Parsing happens first and outside any transaction; a report that does not parse writes nothing.
The upsert is idempotent: the same report twice leaves every ledger row as it was and writes no
event. A device missing from a full-inventory report becomes LOST (掉卡) with an event, and is
FOUND again (with an event) when it returns.

Who may report what:

* Staff and the ``ingest_node_report`` command may report for any node and register new ones;
  a node they register is approved at once (staff acting is the approval).
* A node agent (an ``AgentToken``) reports only for its own cluster and, when the token has a
  ``node_pattern``, only for the nodes it covers (403 otherwise, nothing written). A node it
  registers arrives **pending approval**: it takes no work until staff approve it
  (``node_approve``) or a cluster sync confirms Kubernetes has it (``node_confirm_in_cluster``).
* An agent's report never moves a card away from a node it could not report for itself (another
  cluster, a node outside its pattern) nor onto a node pending approval: such a card is a
  CONFLICT event for staff and stays where the ledger has it.
* An unbound agent token (no node pattern) may not mark cards lost on a node it did not register
  (403, nothing written: apps.inventory.services.agent_losses).
* A report whose vendor is not the node's, or that would register a card with no identity at all
  (no UUID, serial, PCIe bus id, model or memory), is refused with a 400; nothing is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.catalog.selectors import device_model_match
from apps.core.audit import actor_fields, change_record_create
from apps.core.errors import NotFound, PermissionDenied, ValidationFailed
from apps.core.stored_text import stored
from apps.inventory.models import (
    AgentToken,
    Cluster,
    Device,
    DeviceEvent,
    DeviceLink,
    Node,
    NodeReport,
    node_name_problem,
)
from apps.inventory.services.agent_losses import check_agent_may_mark_lost
from apps.inventory.vendors import parse_report
from apps.inventory.vendors.base import ParsedDevice, ParsedReport

# Node fields a report may set, by ParsedReport.node key.
NODE_VERSION_FIELDS = ("driver_version", "cuda_version", "cann_version", "rocm_version", "dtk_version")
# Device fields a report may set (only when the tool says something, i.e. the parsed value is not None).
DEVICE_REPORT_FIELDS = ("uuid", "serial", "pci_bus_id", "numa_node", "memory_mib", "firmware_version")
_TEMP_INDEX_OFFSET = 1_000_000

# Event texts people read later, in their own language (apps.core.stored_text).
UNKNOWN = stored("(unknown)")
VERSION_CHANGED = stored("%(field)s %(old)s → %(new)s")
VERSION_FIELD_WORDS = [
    stored("driver version"),
    stored("cuda version"),
    stored("cann version"),
    stored("rocm version"),
    stored("dtk version"),
]  # NODE_VERSION_FIELDS as the events name them
FIRMWARE_CHANGED = stored("firmware %(old)s → %(new)s")
ON_OTHER_CLUSTER = stored("it is registered on node %(source)s in cluster %(cluster)s")
NOT_COVERED = stored("it is registered on node %(source)s, which this agent token does not cover")
NODE_PENDING = stored("it is registered on node %(source)s and node %(node)s is pending approval")
CARD_CONFLICT = stored(
    "node %(node)s (cluster %(cluster)s) reported card %(card)s, but %(why)s; "
    "the card was not moved. Check which node really holds it."
)
NODE_REGISTERED_PENDING = stored(
    "node %(node)s registered by a %(kind)s report from an agent token; pending approval "
    "(takes no work until staff approve it or a cluster sync confirms it)"
)
NODE_REGISTERED = stored("node %(node)s registered by a %(kind)s report")
REPORTS_RESUMED = stored("reports resumed (overdue since %(since)s)")
MISSING_FROM_REPORT = stored("missing from %(kind)s report")
NO_UUID = stored("no uuid")
CARD_LOST = stored("%(vendor)s card #%(index)s (%(id)s) is missing from the %(kind)s report (掉卡)")
MODEL_NOT_REPORTED = stored("model not reported")
CARD_REGISTERED = stored("%(vendor)s card #%(index)s registered (%(model)s)")
MODEL_UNKNOWN_NEW = stored(
    "unknown device model %(model)s: recorded with the raw name, please add it to the catalog"
)
MODEL_UNKNOWN = stored("unknown device model %(model)s: recorded with the raw name")
CARD_MOVED = stored("card %(card)s moved from %(source)s to %(node)s")
CARD_FOUND = stored("%(vendor)s card #%(index)s is back in the %(kind)s report")
HEALTH_CHANGED = stored("health %(old)s → %(new)s")
HEALTH_CHANGED_BECAUSE = stored("health %(old)s → %(new)s: %(reason)s")
FIELDS_CHANGED = stored("changed: %(fields)s")
TOPOLOGY_WRITTEN = stored("topology: %(written)s links written, %(removed)s removed")
NODE_APPROVED = stored("node %(node)s approved (%(via)s, %(actor)s): it takes work now")
REPORT_INGESTED = stored("%(kind)s report for %(node)s")  # the change record of an ingested report
APPROVED_VIA = stored("approved via %(via)s")
VIA_STAFF = stored("staff")  # who confirmed a node (the ``via`` of NODE_APPROVED)
VIA_CLUSTER_SYNC = stored("confirmed by cluster sync")
# A repeated conflict (the same card reported by the same node) writes one event per this window.
CONFLICT_EVENT_WINDOW = timedelta(hours=24)


@dataclass
class IngestResult:
    parsed: ParsedReport
    node: Node | None = None
    report: NodeReport | None = None
    dry_run: bool = False
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    lost: int = 0
    found: int = 0
    moved: int = 0
    conflicts: int = 0
    links_written: int = 0
    links_removed: int = 0
    node_changed: bool = False
    events: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(
            self.created
            or self.updated
            or self.lost
            or self.found
            or self.moved
            or self.links_written
            or self.links_removed
            or self.node_changed
        )

    def summary(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "lost": self.lost,
            "found": self.found,
            "moved": self.moved,
            "conflicts": self.conflicts,
            "links_written": self.links_written,
            "links_removed": self.links_removed,
            "node_changed": self.node_changed,
            "events": self.events,
            "changed": self.changed,
        }

    def as_dict(self) -> dict[str, Any]:
        body = self.parsed.as_dict()
        body["warnings"] = list(self.parsed.warnings) + self.warnings
        if not self.dry_run:
            body["result"] = self.summary()
            body["node_id"] = self.node.pk if self.node else None
            body["node_pending_approval"] = self.node.pending_approval if self.node else None
            body["report_id"] = self.report.pk if self.report else None
        return body


def _check_size(text: str) -> None:
    limit = settings.SUANCHI["NODE_REPORT_MAX_BYTES"]
    size = len(text.encode())
    if size == 0 or not text.strip():
        raise ValidationFailed("The report is empty.", details={"text": ["empty"]})
    if size > limit:
        raise ValidationFailed(
            f"The report is {size} bytes; the limit is {limit} bytes.", details={"text": ["too large"]}
        )


def node_report_parse(*, kind: str, text: str) -> ParsedReport:
    _check_size(text)
    return parse_report(kind, text)


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
    node = Node(
        cluster=cluster,
        name=node_name,
        status=Node.Status.READY,
        pending_approval=agent is not None,
        registered_by_token=agent,
        last_report_at=None,
    )
    node.full_clean()
    node.save()
    return node, True


class _Recorder:
    """Collects events for one report and writes them in bulk."""

    def __init__(self, *, node: Node, actor_label: str) -> None:
        self.node = node
        self.actor_label = actor_label
        self.events: list[DeviceEvent] = []

    def add(
        self,
        kind: str,
        message: str,
        *,
        device: Device | None = None,
        severity: str = "info",
        before=None,
        after=None,
    ):
        self.events.append(
            DeviceEvent(
                node=self.node,
                device=device,
                kind=kind,
                severity=severity,
                message=message[:500],
                before=before,
                after=after,
                actor_label=self.actor_label,
            )
        )

    def flush(self, report: NodeReport | None) -> int:
        for event in self.events:
            event.report = report
        DeviceEvent.objects.bulk_create(self.events)
        return len(self.events)


def _match_devices(
    devices: list[ParsedDevice], existing: list[Device], by_uuid: dict[str, Device]
) -> list[tuple[ParsedDevice, Device | None]]:
    """Pair each parsed device with a ledger device: UUID (any node), then serial, PCIe bus, index."""
    taken: set[int] = set()
    pairs: list[tuple[ParsedDevice, Device | None]] = []
    local = [d for d in existing if d.health != Device.Health.RETIRED]

    def first(predicate) -> Device | None:
        for device in local:
            if device.pk not in taken and predicate(device):
                return device
        return None

    for p in devices:
        match: Device | None = None
        if p.uuid and p.uuid in by_uuid and by_uuid[p.uuid].pk not in taken:
            match = by_uuid[p.uuid]
        if match is None and p.serial:
            match = first(
                lambda d, p=p: d.serial == p.serial and (not d.uuid or not p.uuid or d.uuid == p.uuid)
            )
        if match is None and p.pci_bus_id:
            match = first(
                lambda d, p=p: d.pci_bus_id == p.pci_bus_id and (not d.uuid or not p.uuid or d.uuid == p.uuid)
            )
        if match is None:
            # Same slot: only when the ledger row has no UUID to contradict the report's.
            match = first(
                lambda d, p=p: d.index == p.index and (not d.uuid or not p.uuid or d.uuid == p.uuid)
            )
        if match is not None:
            taken.add(match.pk)
        pairs.append((p, match))
    return pairs


def _model_for(parsed: ParsedReport, p: ParsedDevice, cache: dict) -> Any:
    key = (p.model_name, p.pci_device_id, p.memory_mib)
    if key not in cache:
        cache[key] = (
            device_model_match(
                vendor=parsed.vendor,
                raw_name=p.model_name,
                pci_device_id=p.pci_device_id,
                memory_mib=p.memory_mib,
            )
            if (p.model_name or p.pci_device_id)
            else None
        )
    return cache[key]


def _apply_node_facts(node: Node, parsed: ParsedReport, rec: _Recorder) -> bool:
    changed = False
    for name in NODE_VERSION_FIELDS:
        value = parsed.node.get(name)
        if value is None:
            continue
        value = str(value)
        old = getattr(node, name)
        if old != value:
            setattr(node, name, value)
            changed = True
            rec.add(
                DeviceEvent.Kind.VERSION_CHANGED,
                VERSION_CHANGED % {"field": name.replace("_", " "), "old": old or UNKNOWN, "new": value},
                before={name: old or None},
                after={name: value},
            )
    nics = parsed.topology.get("nics") if parsed.topology else None
    if nics:
        rdma = []
        for alias, info in sorted(nics.items()):
            gpu_links = info.get("gpu_links") or {}
            nearest = sorted(int(i) for i, link in gpu_links.items() if link in ("PIX", "PXB"))
            rdma.append({"name": info.get("name") or alias, "alias": alias, "nearest_gpus": nearest})
        if rdma != node.rdma_nics:
            rec.add(
                DeviceEvent.Kind.UPDATED,
                "RDMA NICs changed",
                before={"rdma_nics": node.rdma_nics},
                after={"rdma_nics": rdma},
            )
            node.rdma_nics = rdma
            changed = True
    return changed


def _device_changes(device: Device, p: ParsedDevice, model, *, creating: bool) -> dict[str, tuple[Any, Any]]:
    changes: dict[str, tuple[Any, Any]] = {}

    def setf(name: str, value: Any) -> None:
        old = getattr(device, name)
        if old != value:
            changes[name] = (old, value)
            setattr(device, name, value)

    for name in DEVICE_REPORT_FIELDS:
        value = getattr(p, name)
        if value is None or value == "":
            continue
        setf(name, value)
    if p.index != device.index:
        setf("index", p.index)
    if p.model_name:
        setf("raw_model_name", p.model_name[:150])
    if p.model_name or p.pci_device_id:
        setf("device_model", model)
        setf("model_unrecognized", model is None)
    if p.mig_enabled is not None:
        setf("mig_enabled", p.mig_enabled)
        setf("partitions", list(p.partitions))
    if p.pcie_switch is not None:  # "" clears it: the topology report shows no switch
        setf("pcie_switch", p.pcie_switch)
    if p.mig_profiles is not None:
        setf("mig_profiles", _merge_mig_profiles(device.mig_profiles or [], p.mig_profiles))
    return changes


def _merge_mig_profiles(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge a MIG listing into the card's profiles by profile id.

    ``-lgip`` prints names, memory and instance counts but no placements; ``-lgipp`` prints only
    placements. Each listing is complete for what it prints, so the new entries win field by field,
    and a field the listing does not print (None) keeps its stored value. A profile the new listing
    omits is dropped when the listing names its profiles (-lgip, the authority on which profiles
    exist) and kept when it does not (-lgipp).
    """
    by_id = {entry.get("id"): entry for entry in old}
    names_profiles = any(entry.get("name") is not None for entry in new)
    merged: list[dict[str, Any]] = []
    for entry in new:
        previous = by_id.pop(entry["id"], {})
        combined = dict(previous)
        combined.update({key: value for key, value in entry.items() if value is not None})
        for key, value in entry.items():
            combined.setdefault(key, value)
        merged.append(combined)
    if not names_profiles:
        merged.extend(by_id.values())
    return sorted(merged, key=lambda entry: entry["id"])


def _health_for(p: ParsedDevice) -> tuple[str | None, str]:
    if p.health == "degraded":
        return Device.Health.DEGRADED, (p.health_detail or "reported degraded")[:300]
    if p.health == "healthy":
        return Device.Health.HEALTHY, ""
    return None, ""


def _json_safe(changes: dict[str, tuple[Any, Any]], side: int) -> dict[str, Any]:
    out = {}
    for name, pair in changes.items():
        value = pair[side]
        out[name] = value.pk if hasattr(value, "pk") else value
    return out


def _apply_links(
    node: Node, parsed: ParsedReport, devices_by_index: dict[int, Device], result: IngestResult
) -> set[int]:
    """Replace the link set between the report's devices. Returns indices whose topology group changed."""
    if not parsed.links:
        return set()
    wanted: dict[tuple[int, int], str] = {}
    for link in parsed.links:
        a, b = sorted((link.a, link.b))
        if a in devices_by_index and b in devices_by_index and a != b:
            wanted[(devices_by_index[a].pk, devices_by_index[b].pk)] = link.link
        else:
            result.warnings.append(
                f"link {link.a}-{link.b} ({link.link}) names a device not in the ledger; skipped"
            )
    ids = [d.pk for d in devices_by_index.values()]
    current = {
        (min(link.device_a_id, link.device_b_id), max(link.device_a_id, link.device_b_id)): link
        for link in DeviceLink.objects.filter(node=node, device_a__in=ids, device_b__in=ids)
    }
    for pair, raw in wanted.items():
        kind, count = _link_kind(raw)
        existing = current.pop(pair, None)
        if existing is None:
            DeviceLink.objects.create(
                node=node, device_a_id=pair[0], device_b_id=pair[1], kind=kind, link=raw, nvlink_count=count
            )
            result.links_written += 1
        elif existing.link != raw or existing.device_a_id != pair[0]:
            existing.device_a_id, existing.device_b_id = pair
            existing.kind, existing.link, existing.nvlink_count = kind, raw, count
            existing.save()
            result.links_written += 1
    if current:
        DeviceLink.objects.filter(pk__in=[link.pk for link in current.values()]).delete()
        result.links_removed += len(current)


def _link_kind(raw: str) -> tuple[str, int | None]:
    upper = raw.upper()
    if upper.startswith("NV") and upper[2:].isdigit():
        return DeviceLink.Kind.NVLINK, int(upper[2:])
    if upper in DeviceLink.Kind.values:
        return upper, None
    if upper in ("XGMI", "HCCS", "MLULINK"):
        return upper, None
    # npu-smi info -t topo: HCCS_SW = "Connection traversing HCCS through a switch"; SIO = the
    # die-to-die bus inside one A3 chip (aclrtGetDevicesTopo ACL_RT_DEVS_TOPOLOGY_SIO). Both are direct
    # NPU links like HCCS.
    if upper in ("HCCS_SW", "SIO"):
        return DeviceLink.Kind.HCCS, None
    return DeviceLink.Kind.SYS, None


def _topology_groups(parsed: ParsedReport) -> dict[int, str]:
    """Devices joined by direct device links (NVLink, xGMI, HCCS) form one group: connected components."""
    direct = [
        (link.a, link.b)
        for link in parsed.links
        if _link_kind(link.link)[0] in (DeviceLink.Kind.NVLINK, DeviceLink.Kind.XGMI, DeviceLink.Kind.HCCS)
    ]
    if not direct:
        return {}
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in direct:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    prefix = "nvlink" if parsed.vendor == "nvidia" else "link"
    return {index: f"{prefix}-{find(index)}" for index in parent}


def node_report_ingest(
    *,
    node_name: str,
    kind: str,
    text: str,
    actor,
    cluster: Cluster | None = None,
    dry_run: bool = False,
) -> IngestResult:
    _check_node_name(node_name)
    agent = _agent_token(actor)
    if agent is not None:
        # Authorization comes before parsing: a refused caller learns nothing about its text.
        _check_agent_scope(agent=agent, node_name=node_name, cluster=cluster)
        cluster = agent.cluster
    parsed = node_report_parse(kind=kind, text=text)
    kind = parsed.kind  # with kind="auto", the kind that was recognised (stored on the NodeReport)
    result = IngestResult(parsed=parsed, dry_run=dry_run)
    if dry_run:
        return result
    with transaction.atomic():
        _ingest_locked(
            result=result,
            node_name=node_name,
            kind=kind,
            text=text,
            actor=actor,
            cluster=cluster,
            agent=agent,
        )
    return result


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


def _ingest_locked(
    *,
    result: IngestResult,
    node_name: str,
    kind: str,
    text: str,
    actor,
    cluster,
    agent: AgentToken | None = None,
) -> None:
    parsed = result.parsed
    now = timezone.now()
    actor_label = actor_fields(actor)["actor_label"]
    node, node_created = _resolve_node(node_name=node_name, cluster=cluster, agent=agent)
    result.node = node
    _check_vendor(node, parsed, kind)
    rec = _Recorder(node=node, actor_label=actor_label)
    if node_created:
        if node.pending_approval:
            rec.add(
                DeviceEvent.Kind.REGISTERED,
                NODE_REGISTERED_PENDING % {"node": node.name, "kind": kind},
                severity=DeviceEvent.Severity.WARNING,
            )
        else:
            rec.add(DeviceEvent.Kind.REGISTERED, NODE_REGISTERED % {"node": node.name, "kind": kind})
        result.node_changed = True

    result.node_changed |= _apply_node_facts(node, parsed, rec)
    if node.report_overdue_since is not None:
        rec.add(
            DeviceEvent.Kind.REPORTS_RESUMED,
            REPORTS_RESUMED % {"since": f"{node.report_overdue_since:%Y-%m-%d %H:%M %Z}"},
        )
        node.report_overdue_since = None
        result.node_changed = True

    # Lock every ledger row this report can touch, in primary-key order.
    uuids = [p.uuid for p in parsed.devices if p.uuid]
    existing = list(
        Device.objects.select_for_update()
        .filter(node=node, vendor=parsed.vendor)
        .exclude(health=Device.Health.RETIRED)
        .order_by("pk")
    )
    elsewhere = list(
        Device.objects.select_for_update()
        .filter(uuid__in=uuids)
        .exclude(node=node)
        .exclude(health=Device.Health.RETIRED)
        .order_by("pk")
    )
    reported = list(parsed.devices)
    if agent is not None:
        refused = _record_conflicts(
            agent=agent, node=node, elsewhere=elsewhere, rec=rec, result=result, now=now
        )
        if refused:
            elsewhere = [d for d in elsewhere if d.uuid not in refused]
            reported = [p for p in reported if p.uuid not in refused]
    by_uuid = {d.uuid: d for d in existing + elsewhere if d.uuid}
    pairs = _match_devices(reported, existing, by_uuid)
    matched_ids = {d.pk for _, d in pairs if d is not None}
    if parsed.full_inventory:
        _check_identity(pairs, kind)

    if not parsed.full_inventory:
        # Partial reports (topology) only refine devices the ledger already has.
        kept = []
        for p, device in pairs:
            if device is None:
                result.warnings.append(
                    f"device index {p.index} is not in the ledger yet; post a full inventory first"
                )
            else:
                kept.append((p, device))
        pairs = kept

    # 1. Devices missing from a full inventory become LOST (when the reporter may say so).
    if parsed.full_inventory:
        previous_seen = node.last_report_at
        missing = [d for d in existing if d.pk not in matched_ids and d.health != Device.Health.LOST]
        check_agent_may_mark_lost(agent=agent, node=node, missing=missing)
        for device in missing:
            before = {"health": device.health}
            device.health = Device.Health.LOST
            device.health_reason = MISSING_FROM_REPORT % {"kind": kind}
            device.last_seen_at = previous_seen or device.last_seen_at
            device.save(update_fields=["health", "health_reason", "last_seen_at", "updated_at"])
            result.lost += 1
            rec.add(
                DeviceEvent.Kind.LOST,
                CARD_LOST
                % {
                    "vendor": device.vendor,
                    "index": device.index,
                    "id": device.uuid or device.serial or NO_UUID,
                    "kind": kind,
                },
                device=device,
                severity=DeviceEvent.Severity.CRITICAL,
                before=before,
                after={"health": Device.Health.LOST},
            )

    # 2. Matched devices whose index changes move out of the way first (unique slot per node).
    for p, device in pairs:
        if device is not None and (device.index != p.index or device.node_id != node.pk):
            Device.objects.filter(pk=device.pk).update(index=_TEMP_INDEX_OFFSET + device.pk)

    # 3. Update matched devices, create new ones.
    model_cache: dict = {}
    devices_by_index: dict[int, Device] = {}
    groups = _topology_groups(parsed)
    for p, device in pairs:
        model = _model_for(parsed, p, model_cache) if (p.model_name or p.pci_device_id) else None
        health, health_reason = _health_for(p)
        if device is None:
            device = Device(node=node, vendor=parsed.vendor, index=p.index, last_seen_at=now)
            changes = _device_changes(device, p, model, creating=True)
            if health:
                device.health, device.health_reason = health, health_reason
            if p.index in groups:
                device.topology_group = groups[p.index]
            device.full_clean(validate_constraints=False)
            device.save()
            result.created += 1
            rec.add(
                DeviceEvent.Kind.REGISTERED,
                CARD_REGISTERED
                % {"vendor": parsed.vendor, "index": p.index, "model": p.model_name or MODEL_NOT_REPORTED},
                device=device,
                after=_json_safe(changes, 1),
            )
            if device.model_unrecognized:
                rec.add(
                    DeviceEvent.Kind.MODEL_UNRECOGNIZED,
                    MODEL_UNKNOWN_NEW % {"model": repr(p.model_name)},
                    device=device,
                    severity=DeviceEvent.Severity.WARNING,
                )
            devices_by_index[device.index] = device
            continue

        moved_from = device.node if device.node_id != node.pk else None
        was_lost = device.health == Device.Health.LOST
        changes = _device_changes(device, p, model, creating=False)
        if moved_from is not None:
            changes["node"] = (moved_from.pk, node.pk)
            device.node = node
        if p.index in groups and device.topology_group != groups[p.index]:
            changes["topology_group"] = (device.topology_group, groups[p.index])
            device.topology_group = groups[p.index]
        # Health: a returning card is FOUND; otherwise follow what the tool says.
        health_change = None
        if was_lost:
            new_health = health or Device.Health.HEALTHY
            health_change = (device.health, new_health)
            device.health, device.health_reason = new_health, health_reason
            device.last_seen_at = now
        elif health and health != device.health:
            health_change = (device.health, health)
            device.health, device.health_reason = health, health_reason
        if not changes and health_change is None:
            result.unchanged += 1
            devices_by_index[device.index] = device
            continue
        device.full_clean(validate_constraints=False)
        device.save()
        if moved_from is not None:
            result.moved += 1
            rec.add(
                DeviceEvent.Kind.MOVED,
                CARD_MOVED % {"card": device.uuid, "source": moved_from.name, "node": node.name},
                device=device,
                severity=DeviceEvent.Severity.WARNING,
                before={"node": moved_from.name},
                after={"node": node.name},
            )
        if was_lost:
            result.found += 1
            rec.add(
                DeviceEvent.Kind.FOUND,
                CARD_FOUND % {"vendor": device.vendor, "index": device.index, "kind": kind},
                device=device,
                before={"health": Device.Health.LOST},
                after={"health": device.health},
            )
        elif health_change is not None:
            rec.add(
                DeviceEvent.Kind.HEALTH_CHANGED,
                (HEALTH_CHANGED_BECAUSE if health_reason else HEALTH_CHANGED)
                % {"old": health_change[0], "new": health_change[1], "reason": health_reason},
                device=device,
                severity=DeviceEvent.Severity.WARNING
                if health_change[1] != Device.Health.HEALTHY
                else DeviceEvent.Severity.INFO,
                before={"health": health_change[0]},
                after={"health": health_change[1]},
            )
        changes.pop("node", None)
        if "firmware_version" in changes:
            old, new = changes.pop("firmware_version")
            rec.add(
                DeviceEvent.Kind.VERSION_CHANGED,
                FIRMWARE_CHANGED % {"old": old or UNKNOWN, "new": new},
                device=device,
                before={"firmware_version": old or None},
                after={"firmware_version": new},
            )
        if "model_unrecognized" in changes and device.model_unrecognized:
            rec.add(
                DeviceEvent.Kind.MODEL_UNRECOGNIZED,
                MODEL_UNKNOWN % {"model": repr(device.raw_model_name)},
                device=device,
                severity=DeviceEvent.Severity.WARNING,
            )
        if changes:
            rec.add(
                DeviceEvent.Kind.UPDATED,
                FIELDS_CHANGED % {"fields": ", ".join(sorted(changes))},
                device=device,
                before=_json_safe(changes, 0),
                after=_json_safe(changes, 1),
            )
        result.updated += 1
        devices_by_index[device.index] = device

    # Devices the report did not touch still anchor links (topology reports reference them by index).
    for device in existing:
        if device.pk not in matched_ids and device.health != Device.Health.LOST:
            devices_by_index.setdefault(device.index, device)

    _apply_links(node, parsed, devices_by_index, result)
    if result.links_written or result.links_removed:
        rec.add(
            DeviceEvent.Kind.UPDATED,
            TOPOLOGY_WRITTEN % {"written": result.links_written, "removed": result.links_removed},
        )

    if result.node_changed:
        node.full_clean(validate_constraints=False)
    node.last_report_at = now
    node.save()

    result.report = _record_report(
        node=node, kind=kind, text=text, actor_label=actor_label, result=result, now=now
    )
    result.events = rec.flush(result.report)
    if result.report is not None and result.report.summary.get("events") != result.events:
        result.report.summary = result.summary()
        NodeReport.objects.filter(pk=result.report.pk).update(summary=result.report.summary)
    if result.changed:
        change_record_create(
            actor=actor,
            action="node_report.ingest",
            obj=node,
            after={"kind": kind, **result.summary()},
            message=REPORT_INGESTED % {"kind": kind, "node": node.name},
        )


def _record_report(
    *, node: Node, kind: str, text: str, actor_label: str, result: IngestResult, now
) -> NodeReport:
    digest = hashlib.sha256(text.encode()).hexdigest()
    latest = NodeReport.objects.filter(node=node, kind=kind).order_by("-received_at", "-id").first()
    if latest is not None and latest.sha256 == digest and not result.changed:
        NodeReport.objects.filter(pk=latest.pk).update(
            repeat_count=latest.repeat_count + 1, last_received_at=now
        )
        latest.repeat_count += 1
        latest.last_received_at = now
        return latest
    return NodeReport.objects.create(
        node=node,
        kind=kind,
        sha256=digest,
        size_bytes=len(text.encode()),
        raw_text=text,
        actor_label=actor_label,
        summary=result.summary(),
        last_received_at=now,
    )


# --------------------------------------------------------------------------------------------------
# admission of nodes an agent registered


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
    DeviceEvent.objects.create(
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
