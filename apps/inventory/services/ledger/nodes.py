"""The one way a node and its cards enter the ledger.

A node comes in from a node report (an agent's or staff's: ``apps.inventory.services.discovery``),
from the ledger CSV (``csv_import``) or from a cluster sync that finds it in Kubernetes
(``apps.clusters.sync``). Each path creates its rows here, with one validation — a node is validated
whole (``full_clean``: its unique name in the cluster included), a card without the database
constraints (its slot is unique among cards in service: the partial unique index checks that on
save) — and each registration event is written in one shape: a ledger event through the one writer
(``events.device_events_create``), the actor's label, and, when the path keeps one, its audit record.
The text of the event names the path (a report, a CSV line, a sync), in that path's own words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.core.audit import actor_fields, change_record_create
from apps.core.validation import validate, validate_and_save
from apps.inventory.models import Cluster, Device, DeviceEvent, Node
from apps.inventory.services.ledger.events import device_events_create


@dataclass(frozen=True)
class Registration:
    """The event of a node or card entering the ledger: its kind and text, what it says came in
    (``after``), and the action of its audit record (none: the path keeps no audit record per row)."""

    kind: str
    message: str
    after: dict[str, Any] | None = None
    severity: str = DeviceEvent.Severity.INFO
    audit_action: str = ""
    audit_after: dict[str, Any] | None = None
    audit_message: bool = True  # the audit record repeats the event's text


def node_register(
    *,
    cluster: Cluster,
    name: str,
    actor=None,
    values: dict[str, Any] | None = None,
    cards: list[dict[str, Any]] = (),
    registration: Registration | None = None,
) -> tuple[Node, list[Device]]:
    """Create node ``name`` in ``cluster`` with ``values`` and its ``cards`` (each a dict of Device
    fields with ``vendor`` and ``index``), validated; write the node's ``registration`` event.

    A path that writes its events later (a node report, whose events link the stored report) passes
    no ``registration`` and writes the same event with its other events.
    """
    node = validate_and_save(Node(cluster=cluster, name=name, **(values or {})), what=f"node {name}")
    devices = [_card_validate(Device(node=node, **card)) for card in cards]
    if devices:
        Device.objects.bulk_create(devices)
    if registration is not None:
        registration_write(node, registration, actor=actor)
    return node, devices


def device_register(*, node: Node, actor, registration: Registration | None = None, **fields: Any) -> Device:
    """Create one card on ``node`` (``fields``: Device fields with ``vendor`` and ``index``), validated
    as ``node_register`` validates cards; write its ``registration`` event."""
    device = card_save(Device(node=node, **fields))
    if registration is not None:
        registration_write(device, registration, actor=actor)
    return device


def registration_event(obj: Node | Device, registration: Registration, *, actor_label: str) -> DeviceEvent:
    """The (unsaved) registration event of ``obj``: a card's is filed under its node too."""
    node, device = (obj.node, obj) if isinstance(obj, Device) else (obj, None)
    return DeviceEvent(
        node=node,
        device=device,
        kind=registration.kind,
        severity=registration.severity,
        message=registration.message[:500],
        after=registration.after,
        actor_label=actor_label[:150],
    )


def registration_write(obj: Node | Device, registration: Registration, *, actor) -> DeviceEvent:
    """Write ``obj``'s registration event (and its audit record, when the path keeps one)."""
    (event,) = device_events_create(
        [registration_event(obj, registration, actor_label=actor_fields(actor)["actor_label"])]
    )
    if registration.audit_action:
        change_record_create(
            actor=actor,
            action=registration.audit_action,
            obj=obj,
            after=registration.audit_after if registration.audit_after is not None else registration.after,
            message=registration.message if registration.audit_message else "",
        )
    return event


def card_save(device: Device) -> Device:
    """Validate a new card as every path does (see the module docstring) and save it."""
    _card_validate(device)
    device.save()
    return device


def _card_validate(device: Device) -> Device:
    node = device.node
    validate(
        device, what=f"device {device.vendor}#{device.index} on node {node.name}", validate_constraints=False
    )
    return device
