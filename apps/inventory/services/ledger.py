"""Ledger (台账) writes: node status, device pool status / retirement / edits, CSV import and export.

Every state change here locks its rows (``select_for_update``), re-reads the state inside the lock,
validates with ``full_clean()`` and writes both a ``DeviceEvent`` (the ledger history operators read)
and a ``core.ChangeRecord`` (the audit trail). Asking for the state a row is already in is a no-op
and writes no event.

Ledger CSV (one row per device; a row without device columns describes a node only)
--------------------------------------------------------------------------------------
Columns, in export order (``IMPORT_COLUMNS``)::

    cluster          cluster slug (must exist)                                  required
    pool             pool slug inside that cluster (must exist)
    node             node name; created when it does not exist in the cluster   required
    node_status      ready | maintenance | quarantined | draining | retired
    cpu_arch, driver_version, cuda_version, cann_version, rocm_version, dtk_version, rack, switch
    vendor           catalog vendor: nvidia | amd | huawei | hygon | cambricon | intel
    device_index     integer >= 0 (the vendor tool's index on the node)
    device_model     catalog device model name, slug or a product name the tools print; an unknown
                     name is kept as the raw model name and the card is flagged "model unrecognized"
    uuid, serial, pci_bus_id
    numa_node        integer
    firmware_version
    owner_project    project slug (must exist)
    topology_group

Exports add read-only columns (``READ_ONLY_COLUMNS``): health, pool_status, model_unrecognized,
last_seen_at. The import ignores them, except that a row whose health is ``retired`` or ``lost`` is
matched against a retired / lost card of that slot (so an export re-imports unchanged); rows of
retired cards are never imported.

Rules:
- Column order is free; header names are case-insensitive; an unknown column is an error.
- An empty cell leaves the stored value as it is (the import never clears a field).
- A device row needs ``vendor`` and ``device_index``. A device is matched by ``uuid``, else by
  (node, vendor, device_index) among cards in service.
- Node columns may repeat on every row of a node, but must not disagree.
- A status change of an existing node follows the node state machine (``node_status_set``).
- Every row is validated first; when any row has an error nothing is written and
  ``ValidationFailed.details["rows"]`` lists every error as ``{"line", "column", "message"}``, where
  line 1 is the header.
- Files are UTF-8 (with or without BOM); GB18030 (Excel on a Chinese Windows) is accepted too. A
  cell the export prefixed with ``'`` to defuse a spreadsheet formula (``'=...``) is read back without
  the quote.
"""

from __future__ import annotations

import csv
import io
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.accounts.models import Project
from apps.catalog.models import DeviceModel, Vendor
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import Conflict, InvalidTransition, ValidationFailed
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool

__all__ = [
    "DEVICE_EDITABLE_FIELDS",
    "EXPORT_COLUMNS",
    "IMPORT_COLUMNS",
    "READ_ONLY_COLUMNS",
    "ImportReport",
    "device_pool_status_set",
    "device_retire",
    "device_update",
    "ledger_export",
    "ledger_import_csv",
    "node_status_set",
]

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

IMPORT_COLUMNS = (
    "cluster",
    "pool",
    "node",
    "node_status",
    "cpu_arch",
    "driver_version",
    "cuda_version",
    "cann_version",
    "rocm_version",
    "dtk_version",
    "rack",
    "switch",
    "vendor",
    "device_index",
    "device_model",
    "uuid",
    "serial",
    "pci_bus_id",
    "numa_node",
    "firmware_version",
    "owner_project",
    "topology_group",
)
READ_ONLY_COLUMNS = ("health", "pool_status", "model_unrecognized", "last_seen_at")
EXPORT_COLUMNS = IMPORT_COLUMNS + READ_ONLY_COLUMNS

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
_DEVICE_COLUMNS = (
    "vendor",
    "device_index",
    "device_model",
    "uuid",
    "serial",
    "pci_bus_id",
    "numa_node",
    "firmware_version",
    "owner_project",
    "topology_group",
)
_DEVICE_TEXT_COLUMNS = ("uuid", "serial", "pci_bus_id", "firmware_version", "topology_group")
# Device fields the import may write, in a stable order (for diffs and events).
_DEVICE_IMPORT_FIELDS = (
    "index",
    "device_model",
    "raw_model_name",
    "model_unrecognized",
    "uuid",
    "serial",
    "pci_bus_id",
    "numa_node",
    "firmware_version",
    "owner_project",
    "topology_group",
)
_NODE_IMPORT_FIELDS = ("pool", *_NODE_TEXT_COLUMNS)
# Slots of cards out of service may be taken by a replacement (see Device's unique index).
_OUT_OF_SERVICE = (Device.Health.RETIRED, Device.Health.LOST)
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
MAX_IMPORT_ROWS = 20_000


# --------------------------------------------------------------------------------------------------
# helpers


def _full_clean(obj: models.Model, *, what: str) -> None:
    try:
        obj.full_clean()
    except DjangoValidationError as exc:
        details = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
        flat = "; ".join(f"{k}: {' '.join(v)}" for k, v in details.items())
        raise ValidationFailed(f"{what} is invalid: {flat}", details=details)


def _event(
    *,
    node: Node,
    device: Device | None,
    kind: str,
    message: str,
    actor,
    severity: str = DeviceEvent.Severity.INFO,
    before: dict | None = None,
    after: dict | None = None,
) -> DeviceEvent:
    return DeviceEvent.objects.create(
        node=node,
        device=device,
        kind=kind,
        severity=severity,
        message=message[:500],
        before=before,
        after=after,
        actor_label=actor_fields(actor)["actor_label"][:150],
    )


def _with_reason(text: str, reason: str) -> str:
    return f"{text}: {reason}" if reason else text


def _taints_for(taints: list, status: str) -> list:
    """The node's taints with Suanchi's status taints matching ``status``; others are kept as they are."""
    kept = [t for t in (taints or []) if not (isinstance(t, dict) and t.get("key") in _OWN_TAINT_KEYS)]
    if status in _STATUS_TAINTS:
        kept.append(dict(_STATUS_TAINTS[status]))
    return kept


def _node_transition_error(node: Node, target: str) -> str | None:
    current = node.status
    if target == current or target in NODE_TRANSITIONS[current]:
        return None
    if current == S.RETIRED:
        return f"node {node.name} is retired; a retired node cannot become {target}"
    allowed = ", ".join(sorted(NODE_TRANSITIONS[current]))
    return f"node {node.name} is {current}; a {current} node cannot become {target} (it can become: {allowed})"


def _reason_required(current: str, target: str) -> bool:
    return target == S.RETIRED or (current == S.QUARANTINED and target == S.READY)


def _node_transition_wording(current: str, target: str) -> tuple[str, str, str]:
    """(event kind, severity, wording) for a node status change."""
    if target == S.RETIRED:
        return DeviceEvent.Kind.RETIRED, DeviceEvent.Severity.WARNING, "retired"
    if target == S.QUARANTINED:
        return DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.WARNING, "quarantined"
    if current == S.QUARANTINED:
        return DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.INFO, f"released from quarantine to {target}"
    if target == S.MAINTENANCE:
        return DeviceEvent.Kind.MAINTENANCE, DeviceEvent.Severity.INFO, "maintenance on"
    if current == S.MAINTENANCE:
        return DeviceEvent.Kind.MAINTENANCE, DeviceEvent.Severity.INFO, f"maintenance off ({target})"
    return DeviceEvent.Kind.STATUS_CHANGED, DeviceEvent.Severity.INFO, f"status {current} → {target}"


_NODE_STATUS_FIELDS = ["status", "status_reason", "taints"]


def _node_transition_locked(*, node: Node, status: str, reason: str, actor) -> bool:
    """Move a node already locked by the caller. Returns False when it already is in ``status``."""
    current = node.status
    if status == current:
        return False
    error = _node_transition_error(node, status)
    if error:
        raise InvalidTransition(error, details={"status": current, "requested": status})
    if _reason_required(current, status) and not reason:
        raise ValidationFailed(
            f"a reason is required to move node {node.name} from {current} to {status}",
            details={"reason": ["This field is required."]},
        )
    before = snapshot(node, _NODE_STATUS_FIELDS)
    node.status = status
    node.status_reason = reason
    node.taints = _taints_for(node.taints, status)
    _full_clean(node, what=f"node {node.name}")
    node.save(update_fields=[*_NODE_STATUS_FIELDS, "updated_at"])
    after = snapshot(node, _NODE_STATUS_FIELDS)
    kind, severity, wording = _node_transition_wording(current, status)
    message = _with_reason(f"node {node.name} {wording}", reason)
    _event(
        node=node, device=None, kind=kind, severity=severity, message=message, before=before, after=after, actor=actor
    )
    change_record_create(
        actor=actor, action="node.status_set", obj=node, before=before, after=after, message=message
    )
    if status == S.RETIRED:
        devices = (
            Device.objects.select_for_update()
            .filter(node=node)
            .exclude(health=Device.Health.RETIRED)
            .order_by("pk")
        )
        for device in devices:
            device.node = node
            _device_retire_locked(device=device, reason=f"node {node.name} retired: {reason}"[:300], actor=actor)
    return True


def _lock_device(device: Device) -> Device:
    return Device.objects.select_for_update(of=("self",)).select_related("node").get(pk=device.pk)


def _device_retire_locked(*, device: Device, reason: str, actor) -> bool:
    if device.health == Device.Health.RETIRED:
        return False
    fields = ["health", "health_reason"]
    before = snapshot(device, fields)
    device.health = Device.Health.RETIRED
    device.health_reason = reason
    _full_clean(device, what=f"device {device}")
    device.save(update_fields=[*fields, "updated_at"])
    after = snapshot(device, fields)
    message = _with_reason(f"device {device} retired", reason)
    _event(
        node=device.node,
        device=device,
        kind=DeviceEvent.Kind.RETIRED,
        severity=DeviceEvent.Severity.WARNING,
        message=message,
        before=before,
        after=after,
        actor=actor,
    )
    change_record_create(actor=actor, action="device.retire", obj=device, before=before, after=after, message=message)
    return True


# --------------------------------------------------------------------------------------------------
# node and device state changes


@transaction.atomic
def node_status_set(*, node: Node, status: str, reason: str = "", actor) -> Node:
    """Move a node through its state machine (see ``NODE_TRANSITIONS``) and keep its taints in step.

    Releasing a quarantined node and retiring a node need a reason; retiring a node retires all
    its cards in service, each with its own event.
    """
    if status not in S.values:
        raise ValidationFailed(
            f"unknown node status {status!r}", details={"status": [f"Choose one of: {', '.join(S.values)}."]}
        )
    reason = (reason or "").strip()
    locked = Node.objects.select_for_update().get(pk=node.pk)
    _node_transition_locked(node=locked, status=status, reason=reason, actor=actor)
    return locked


@transaction.atomic
def device_pool_status_set(*, device: Device, pool_status: str, reason: str = "", actor) -> Device:
    """Put a card in production, gray (canary) or quarantine. Quarantine needs a reason."""
    P = Device.PoolStatus
    if pool_status not in P.values:
        raise ValidationFailed(
            f"unknown pool status {pool_status!r}",
            details={"pool_status": [f"Choose one of: {', '.join(P.values)}."]},
        )
    reason = (reason or "").strip()
    locked = _lock_device(device)
    if locked.health == Device.Health.RETIRED:
        raise InvalidTransition(
            f"device {locked} is retired; a retired device cannot move to {pool_status}",
            details={"health": locked.health, "requested": pool_status},
        )
    current = locked.pool_status
    if pool_status == current:
        return locked
    if pool_status == P.QUARANTINE and not reason:
        raise ValidationFailed(
            f"a reason is required to quarantine device {locked}", details={"reason": ["This field is required."]}
        )
    fields = ["pool_status"]
    before = snapshot(locked, fields)
    locked.pool_status = pool_status
    _full_clean(locked, what=f"device {locked}")
    locked.save(update_fields=[*fields, "updated_at"])
    after = snapshot(locked, fields)
    if pool_status == P.QUARANTINE:
        kind, severity, wording = DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.WARNING, "quarantined"
    elif current == P.QUARANTINE:
        kind, severity, wording = DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.INFO, f"released to {pool_status}"
    else:
        kind, severity, wording = DeviceEvent.Kind.STATUS_CHANGED, DeviceEvent.Severity.INFO, f"moved to {pool_status}"
    message = _with_reason(f"device {locked} {wording} (was {current})", reason)
    _event(
        node=locked.node,
        device=locked,
        kind=kind,
        severity=severity,
        message=message,
        before=before,
        after=after,
        actor=actor,
    )
    change_record_create(
        actor=actor, action="device.pool_status_set", obj=locked, before=before, after=after, message=message
    )
    return locked


@transaction.atomic
def device_retire(*, device: Device, reason: str, actor) -> Device:
    """Retire a card for good (its slot becomes free for a replacement). Already retired: no-op."""
    reason = (reason or "").strip()
    locked = _lock_device(device)
    if locked.health == Device.Health.RETIRED:
        return locked
    if not reason:
        raise ValidationFailed(
            f"a reason is required to retire device {locked}", details={"reason": ["This field is required."]}
        )
    _device_retire_locked(device=locked, reason=reason, actor=actor)
    return locked


def _normalise_edit(name: str, value: Any, device: Device) -> Any:
    if name == "owner_project":
        if value is not None and not isinstance(value, Project):
            raise ValidationFailed("owner_project must be a project", details={name: ["Expected a project or null."]})
        return value
    if name == "device_model":
        if value is not None and not isinstance(value, DeviceModel):
            raise ValidationFailed(
                "device_model must be a device model", details={name: ["Expected a device model or null."]}
            )
        if value is not None and value.vendor != device.vendor:
            raise ValidationFailed(
                f"device model {value.name} is a {value.vendor} model; device {device} is {device.vendor}",
                details={name: [f"Choose a {device.vendor} model."]},
            )
        return value
    if name == "numa_node":
        if value in (None, ""):
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationFailed("numa_node must be an integer", details={name: ["Expected an integer."]})
        return value
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed(f"{name} must be text", details={name: ["Expected text."]})
    return value.strip()


def _edit_value(device: Device, name: str) -> Any:
    return getattr(device, f"{name}_id") if name in ("owner_project", "device_model") else getattr(device, name)


@transaction.atomic
def device_update(*, device: Device, actor, **fields: Any) -> Device:
    """Edit a card's ledger fields (``DEVICE_EDITABLE_FIELDS``). Only changed fields are written.

    ``owner_project`` takes a Project or None, ``device_model`` a DeviceModel of the card's vendor or
    None (naming a model marks the card recognised; clearing it marks it unrecognised).
    """
    unknown = sorted(set(fields) - set(DEVICE_EDITABLE_FIELDS))
    if unknown:
        raise ValidationFailed(
            f"not editable in the ledger: {', '.join(unknown)}",
            details={name: ["This field cannot be edited."] for name in unknown},
        )
    locked = _lock_device(device)
    changes: dict[str, Any] = {}
    for name, raw in fields.items():
        value = _normalise_edit(name, raw, locked)
        new = value.pk if isinstance(value, models.Model) else value
        if new != _edit_value(locked, name):
            changes[name] = value
    if not changes:
        return locked
    changed = list(changes)
    if "device_model" in changes:
        changed.append("model_unrecognized")
    before = snapshot(locked, changed)
    for name, value in changes.items():
        setattr(locked, name, value)
    if "device_model" in changes:
        # The flag follows the model: a named model is recognised, no model is not.
        locked.model_unrecognized = locked.device_model_id is None
    _full_clean(locked, what=f"device {locked}")
    after = snapshot(locked, changed)
    diff_fields = [name for name in changed if before[name] != after[name]]
    locked.save(update_fields=[*diff_fields, "updated_at"])
    before = {k: before[k] for k in diff_fields}
    after = {k: after[k] for k in diff_fields}
    message = f"device {locked} updated: {', '.join(diff_fields)}"
    _event(
        node=locked.node,
        device=locked,
        kind=DeviceEvent.Kind.UPDATED,
        message=message,
        before=before,
        after=after,
        actor=actor,
    )
    change_record_create(actor=actor, action="device.update", obj=locked, before=before, after=after, message=message)
    return locked
