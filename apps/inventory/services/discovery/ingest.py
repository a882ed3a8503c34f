"""Ingesting a parsed node report into the ledger under lock, in named steps."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from apps.core.audit import actor_fields, change_record_create
from apps.core.validation import validate
from apps.inventory.models import (
    AgentToken,
    Cluster,
    Device,
    DeviceEvent,
    Node,
    NodeReport,
)
from apps.inventory.services.agent_losses import check_agent_may_mark_lost
from apps.inventory.services.discovery.access import (
    _agent_token,
    _check_agent_scope,
    _check_identity,
    _check_node_name,
    _check_vendor,
    _record_conflicts,
    _resolve_node,
)
from apps.inventory.services.discovery.common import (
    _TEMP_INDEX_OFFSET,
    CARD_FOUND,
    CARD_LOST,
    CARD_MOVED,
    CARD_REGISTERED,
    FIELDS_CHANGED,
    FIRMWARE_CHANGED,
    HEALTH_CHANGED,
    HEALTH_CHANGED_BECAUSE,
    MISSING_FROM_REPORT,
    MODEL_NOT_REPORTED,
    MODEL_UNKNOWN,
    MODEL_UNKNOWN_NEW,
    NO_UUID,
    NODE_REGISTERED,
    NODE_REGISTERED_PENDING,
    REPORT_INGESTED,
    REPORTS_RESUMED,
    TOPOLOGY_WRITTEN,
    UNKNOWN,
    IngestResult,
    _Recorder,
    node_report_parse,
)
from apps.inventory.services.discovery.devices import (
    _apply_links,
    _apply_node_facts,
    _device_changes,
    _health_for,
    _json_safe,
    _match_devices,
    _model_for,
    _topology_groups,
)
from apps.inventory.services.ledger.nodes import card_save
from apps.inventory.vendors.base import ParsedDevice


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


@dataclass
class _Ingest:
    """One report's ingestion under lock: what every step reads and writes."""

    result: IngestResult
    kind: str
    agent: AgentToken | None
    node: Node
    rec: _Recorder
    now: datetime
    # Ledger cards of the report's vendor on the node (locked), and the report's (ParsedDevice,
    # Device | None) pairs, None for a card the ledger does not have yet.
    existing: list[Device] = field(default_factory=list)
    pairs: list[tuple[ParsedDevice, Device | None]] = field(default_factory=list)
    matched_ids: set[int] = field(default_factory=set)
    devices_by_index: dict[int, Device] = field(default_factory=dict)


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
    now = timezone.now()
    actor_label = actor_fields(actor)["actor_label"]
    node, node_created = _resolve_node(node_name=node_name, cluster=cluster, agent=agent)
    result.node = node
    _check_vendor(node, result.parsed, kind)
    step = _Ingest(
        result=result,
        kind=kind,
        agent=agent,
        node=node,
        rec=_Recorder(node=node, actor_label=actor_label),
        now=now,
    )
    _node_facts(step, created=node_created)
    _lock_and_pair(step)
    if result.parsed.full_inventory:
        _mark_missing_lost(step)
    _write_devices(step)
    _write_links(step)
    if result.node_changed:
        validate(node, what=f"node {node.name}", validate_constraints=False)
    node.last_report_at = step.now
    node.save()
    _record_outcome(step, text=text, actor=actor, actor_label=actor_label)


def _node_facts(step: _Ingest, *, created: bool) -> None:
    """The node's registration (when the report created it), its facts, and its reports resuming."""
    node, rec, result, kind = step.node, step.rec, step.result, step.kind
    if created:
        if node.pending_approval:
            rec.add(
                DeviceEvent.Kind.REGISTERED,
                NODE_REGISTERED_PENDING % {"node": node.name, "kind": kind},
                severity=DeviceEvent.Severity.WARNING,
            )
        else:
            rec.add(DeviceEvent.Kind.REGISTERED, NODE_REGISTERED % {"node": node.name, "kind": kind})
        result.node_changed = True

    result.node_changed |= _apply_node_facts(node, result.parsed, rec)
    if node.report_overdue_since is not None:
        rec.add(
            DeviceEvent.Kind.REPORTS_RESUMED,
            REPORTS_RESUMED % {"since": f"{node.report_overdue_since:%Y-%m-%d %H:%M %Z}"},
        )
        node.report_overdue_since = None
        result.node_changed = True


def _lock_and_pair(step: _Ingest) -> None:
    """Lock every ledger row this report can touch, in primary-key order, and pair the report's
    cards with them (an agent's report never takes a card it may not move: a CONFLICT event)."""
    node, parsed, result = step.node, step.result.parsed, step.result
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
    if step.agent is not None:
        refused = _record_conflicts(
            agent=step.agent, node=node, elsewhere=elsewhere, rec=step.rec, result=result, now=step.now
        )
        if refused:
            elsewhere = [d for d in elsewhere if d.uuid not in refused]
            reported = [p for p in reported if p.uuid not in refused]
    by_uuid = {d.uuid: d for d in existing + elsewhere if d.uuid}
    pairs = _match_devices(reported, existing, by_uuid)
    step.existing = existing
    step.matched_ids = {d.pk for _, d in pairs if d is not None}
    if parsed.full_inventory:
        _check_identity(pairs, step.kind)
    else:
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
    step.pairs = pairs


def _mark_missing_lost(step: _Ingest) -> None:
    """Devices missing from a full inventory become LOST (when the reporter may say so)."""
    node, kind = step.node, step.kind
    previous_seen = node.last_report_at
    missing = [d for d in step.existing if d.pk not in step.matched_ids and d.health != Device.Health.LOST]
    check_agent_may_mark_lost(agent=step.agent, node=node, missing=missing)
    for device in missing:
        before = {"health": device.health}
        device.health = Device.Health.LOST
        device.health_reason = MISSING_FROM_REPORT % {"kind": kind}
        device.last_seen_at = previous_seen or device.last_seen_at
        device.save(update_fields=["health", "health_reason", "last_seen_at", "updated_at"])
        step.result.lost += 1
        step.rec.add(
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


def _write_devices(step: _Ingest) -> None:
    """Update the matched devices and create the new ones."""
    node = step.node
    # Matched devices whose index changes move out of the way first (unique slot per node).
    for p, device in step.pairs:
        if device is not None and (device.index != p.index or device.node_id != node.pk):
            Device.objects.filter(pk=device.pk).update(index=_TEMP_INDEX_OFFSET + device.pk)
    model_cache: dict = {}
    groups = _topology_groups(step.result.parsed)
    for p, device in step.pairs:
        parsed = step.result.parsed
        model = _model_for(parsed, p, model_cache) if (p.model_name or p.pci_device_id) else None
        if device is None:
            device = _create_device(step, p, model, groups)
        else:
            _update_device(step, p, device, model, groups)
        step.devices_by_index[device.index] = device


def _create_device(step: _Ingest, p: ParsedDevice, model, groups: dict[int, str]) -> Device:
    parsed = step.result.parsed
    health, health_reason = _health_for(p)
    device = Device(node=step.node, vendor=parsed.vendor, index=p.index, last_seen_at=step.now)
    changes = _device_changes(device, p, model, creating=True)
    if health:
        device.health, device.health_reason = health, health_reason
    if p.index in groups:
        device.topology_group = groups[p.index]
    card_save(device)
    step.result.created += 1
    step.rec.add(
        DeviceEvent.Kind.REGISTERED,
        CARD_REGISTERED
        % {"vendor": parsed.vendor, "index": p.index, "model": p.model_name or MODEL_NOT_REPORTED},
        device=device,
        after=_json_safe(changes, 1),
    )
    if device.model_unrecognized:
        step.rec.add(
            DeviceEvent.Kind.MODEL_UNRECOGNIZED,
            MODEL_UNKNOWN_NEW % {"model": repr(p.model_name)},
            device=device,
            severity=DeviceEvent.Severity.WARNING,
        )
    return device


def _update_device(step: _Ingest, p: ParsedDevice, device: Device, model, groups: dict[int, str]) -> None:
    node, result = step.node, step.result
    health, health_reason = _health_for(p)
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
        device.last_seen_at = step.now
    elif health and health != device.health:
        health_change = (device.health, health)
        device.health, device.health_reason = health, health_reason
    if not changes and health_change is None:
        result.unchanged += 1
        return
    validate(
        device, what=f"device {device.vendor}#{device.index} on node {node.name}", validate_constraints=False
    )
    device.save()
    if moved_from is not None:
        result.moved += 1
        step.rec.add(
            DeviceEvent.Kind.MOVED,
            CARD_MOVED % {"card": device.uuid, "source": moved_from.name, "node": node.name},
            device=device,
            severity=DeviceEvent.Severity.WARNING,
            before={"node": moved_from.name},
            after={"node": node.name},
        )
    _record_device_changes(step, device, changes, was_lost=was_lost, health_change=health_change)
    result.updated += 1


def _record_device_changes(
    step: _Ingest, device: Device, changes: dict, *, was_lost: bool, health_change: tuple | None
) -> None:
    """The events of an updated card: found again or its health, firmware, model, other fields."""
    rec = step.rec
    if was_lost:
        step.result.found += 1
        rec.add(
            DeviceEvent.Kind.FOUND,
            CARD_FOUND % {"vendor": device.vendor, "index": device.index, "kind": step.kind},
            device=device,
            before={"health": Device.Health.LOST},
            after={"health": device.health},
        )
    elif health_change is not None:
        health_reason = device.health_reason
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


def _write_links(step: _Ingest) -> None:
    """The report's topology links; devices the report did not touch still anchor links (topology
    reports reference them by index)."""
    for device in step.existing:
        if device.pk not in step.matched_ids and device.health != Device.Health.LOST:
            step.devices_by_index.setdefault(device.index, device)
    result = step.result
    _apply_links(step.node, result.parsed, step.devices_by_index, result)
    if result.links_written or result.links_removed:
        step.rec.add(
            DeviceEvent.Kind.UPDATED,
            TOPOLOGY_WRITTEN % {"written": result.links_written, "removed": result.links_removed},
        )


def _record_outcome(step: _Ingest, *, text: str, actor, actor_label: str) -> None:
    """The stored report, the collected events, and the change record of a report that changed
    something."""
    node, kind, result = step.node, step.kind, step.result
    result.report = _record_report(
        node=node, kind=kind, text=text, actor_label=actor_label, result=result, now=step.now
    )
    result.events = step.rec.flush(result.report)
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
