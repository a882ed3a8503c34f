"""What every ledger write shares: the node status taints, the columns, the event texts, and
``_record`` (the ledger event and its audit record of one change)."""

from __future__ import annotations

from typing import Any

from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.stored_text import stored
from apps.core.validation import validate_and_save
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger.events import device_event_create

S = Node.Status

MAINTENANCE_TAINT = {"key": "suanchi.io/maintenance", "value": "true", "effect": "NoSchedule"}
QUARANTINE_TAINT = {"key": "suanchi.io/quarantine", "value": "true", "effect": "NoExecute"}
_STATUS_TAINTS = {S.MAINTENANCE: MAINTENANCE_TAINT, S.QUARANTINED: QUARANTINE_TAINT}
_OWN_TAINT_KEYS = {t["key"] for t in _STATUS_TAINTS.values()}

# Allowed node transitions: current status -> statuses it may move to.
NODE_TRANSITIONS: dict[str, frozenset[str]] = {
    S.READY: frozenset({S.MAINTENANCE, S.QUARANTINED, S.DRAINING, S.RETIRED}),
    S.MAINTENANCE: frozenset({S.READY, S.QUARANTINED, S.RETIRED}),
    S.DRAINING: frozenset({S.READY, S.MAINTENANCE, S.QUARANTINED, S.RETIRED}),
    S.QUARANTINED: frozenset({S.READY, S.RETIRED}),
    S.RETIRED: frozenset(),
}

# Device fields an operator may edit in the ledger (everything else comes from discovery or actions).
DEVICE_EDITABLE_FIELDS = (
    "owner_project",
    "topology_group",
    "serial",
    "firmware_version",
    "pci_bus_id",
    "numa_node",
    "device_model",
)

# Node columns that map 1:1 to Node fields (pool and node_status are handled apart).
_NODE_TEXT_COLUMNS = (
    "cpu_arch",
    "driver_version",
    "cuda_version",
    "cann_version",
    "rocm_version",
    "dtk_version",
    "rack",
    "switch",
)
# Device columns named after the Device field they write.
_DEVICE_FIELD_COLUMNS = (
    "uuid",
    "serial",
    "pci_bus_id",
    "numa_node",
    "firmware_version",
    "owner_project",
    "topology_group",
)
_DEVICE_COLUMNS = ("vendor", "device_index", "device_model", *_DEVICE_FIELD_COLUMNS)
IMPORT_COLUMNS = ("cluster", "pool", "node", "node_status", *_NODE_TEXT_COLUMNS, *_DEVICE_COLUMNS)
READ_ONLY_COLUMNS = ("health", "pool_status", "model_unrecognized", "last_seen_at")
EXPORT_COLUMNS = IMPORT_COLUMNS + READ_ONLY_COLUMNS

_DEVICE_TEXT_COLUMNS = ("uuid", "serial", "pci_bus_id", "firmware_version", "topology_group")
# Device fields the import may write, in a stable order (for diffs and events).
_DEVICE_IMPORT_FIELDS = (
    "index",
    "device_model",
    "raw_model_name",
    "model_unrecognized",
    *_DEVICE_FIELD_COLUMNS,
)
# Slots of cards out of service may be taken by a replacement (see Device's unique index).
_OUT_OF_SERVICE = (Device.Health.RETIRED, Device.Health.LOST)
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
MAX_IMPORT_ROWS = 20_000


# --------------------------------------------------------------------------------------------------
# helpers


def _save_fields(obj: Node | Device, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Set ``values`` on a locked row, validate and save them: (before, after) snapshots of those fields."""
    fields = list(values)
    before = snapshot(obj, fields)
    for name, value in values.items():
        setattr(obj, name, value)
    validate_and_save(obj, what=f"{obj._meta.model_name} {obj}", update_fields=[*fields, "updated_at"])
    return before, snapshot(obj, fields)


def _record(
    obj: Node | Device,
    *,
    action: str,
    kind: str,
    message: str,
    actor,
    severity: str = DeviceEvent.Severity.INFO,
    before: dict | None = None,
    after: dict | None = None,
) -> None:
    """Write a change's ``DeviceEvent`` (ledger history) and its ``ChangeRecord`` (audit trail).

    A device's event is also filed under its node; a node's event has no device.
    """
    node, device = (obj.node, obj) if isinstance(obj, Device) else (obj, None)
    device_event_create(
        node=node,
        device=device,
        kind=kind,
        severity=severity,
        message=message[:500],
        before=before,
        after=after,
        actor_label=actor_fields(actor)["actor_label"][:150],
    )
    change_record_create(actor=actor, action=action, obj=obj, before=before, after=after, message=message)


def _with_reason(text: str, reason: str) -> str:
    return f"{text}: {reason}" if reason else text


# Event texts people read later, in their own language (apps.core.stored_text); "…: %(reason)s"
# is the same text with the operator's reason.
DEVICE_RETIRED = stored("device %(device)s retired")
DEVICE_RETIRED_BECAUSE = stored("device %(device)s retired: %(reason)s")
NODE_RETIRED_BECAUSE = stored("node %(node)s retired: %(reason)s")
DEVICE_UPDATED = stored("device %(device)s updated: %(fields)s")
NODE_CHANGE = stored("node %(node)s %(change)s")
NODE_CHANGE_BECAUSE = stored("node %(node)s %(change)s: %(reason)s")
RETIRED = stored("retired")
QUARANTINED = stored("quarantined")
MAINTENANCE_ON = stored("maintenance on")
RELEASED_FROM_QUARANTINE = stored("released from quarantine to %(to)s")
MAINTENANCE_OFF = stored("maintenance off (%(to)s)")
STATUS_CHANGE = stored("status %(old)s → %(to)s")
RELEASED_TO = stored("released to %(to)s")
MOVED_TO = stored("moved to %(to)s")
DEVICE_CHANGE = stored("device %(device)s %(change)s (was %(was)s)")
DEVICE_CHANGE_BECAUSE = stored("device %(device)s %(change)s (was %(was)s): %(reason)s")
CORDONED = stored("device %(device)s cordoned: no new allocations")
CORDONED_BECAUSE = stored("device %(device)s cordoned: no new allocations: %(reason)s")
CORDONED_RUNNING = stored("device %(device)s cordoned: no new allocations (running work continues: %(jobs)s)")
CORDONED_RUNNING_BECAUSE = stored(
    "device %(device)s cordoned: no new allocations (running work continues: %(jobs)s): %(reason)s"
)
CORDON_LIFTED = stored("device %(device)s cordon lifted")
CORDON_LIFTED_BECAUSE = stored("device %(device)s cordon lifted: %(reason)s")
# The ledger CSV import: its events, the reason of a status it sets, its progress phases.
NODE_IMPORTED = stored("node %(node)s imported from the ledger CSV (line %(line)s)")
NODE_IMPORT_UPDATED = stored("node %(node)s updated from the ledger CSV (line %(line)s): %(fields)s")
DEVICE_IMPORTED = stored("device %(device)s imported from the ledger CSV (line %(line)s)")
DEVICE_IMPORT_UPDATED = stored("device %(device)s updated from the ledger CSV (line %(line)s): %(fields)s")
IMPORT_STATUS_REASON = stored("ledger import, line %(line)s")
VALIDATING = stored("validating")
WRITING = stored("writing")


def _reasoned(plain: str, because: str, reason: str, **params) -> str:
    """``plain % params``, or ``because % params`` carrying the reason when there is one."""
    return (because % {**params, "reason": reason}) if reason else (plain % params)


def _taints_for(taints: list, status: str) -> list:
    """The node's taints with Suanchi's status taints matching ``status``; others are kept as they are."""
    kept = [t for t in (taints or []) if not (isinstance(t, dict) and t.get("key") in _OWN_TAINT_KEYS)]
    if status in _STATUS_TAINTS:
        kept.append(dict(_STATUS_TAINTS[status]))
    return kept
