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

from django.db import IntegrityError, models, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.models import Project
from apps.catalog.models import DeviceModel, Vendor
from apps.core import runs
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import ApplicationError, Conflict, InvalidTransition, ValidationFailed
from apps.core.exports import formula_escape, xlsx_append
from apps.core.models import BackgroundRun
from apps.core.stored_text import stored
from apps.core.validation import validate, validate_and_save
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.inventory.vendors.adapter import normalise_pci_bus_id

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
    DeviceEvent.objects.create(
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


def _node_transition_error(node: Node, target: str) -> str | None:
    current = node.status
    if target == current or target in NODE_TRANSITIONS[current]:
        return None
    if current == S.RETIRED:
        return _("node %(node)s is retired; a retired node cannot become %(target)s") % {
            "node": node.name,
            "target": target,
        }
    allowed = ", ".join(sorted(NODE_TRANSITIONS[current]))
    return _(
        "node %(node)s is %(current)s; a %(current)s node cannot become %(target)s (it can become: %(allowed)s)"
    ) % {
        "node": node.name,
        "current": current,
        "target": target,
        "allowed": allowed,
    }


def _reason_required(current: str, target: str) -> bool:
    return target == S.RETIRED or (current == S.QUARANTINED and target == S.READY)


def _node_transition_wording(current: str, target: str) -> tuple[str, str, str]:
    """(event kind, severity, wording) for a node status change."""
    if target == S.RETIRED:
        return DeviceEvent.Kind.RETIRED, DeviceEvent.Severity.WARNING, RETIRED
    if target == S.QUARANTINED:
        return DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.WARNING, QUARANTINED
    if current == S.QUARANTINED:
        return (
            DeviceEvent.Kind.QUARANTINE,
            DeviceEvent.Severity.INFO,
            RELEASED_FROM_QUARANTINE % {"to": target},
        )
    if target == S.MAINTENANCE:
        return DeviceEvent.Kind.MAINTENANCE, DeviceEvent.Severity.INFO, MAINTENANCE_ON
    if current == S.MAINTENANCE:
        return DeviceEvent.Kind.MAINTENANCE, DeviceEvent.Severity.INFO, MAINTENANCE_OFF % {"to": target}
    return (
        DeviceEvent.Kind.STATUS_CHANGED,
        DeviceEvent.Severity.INFO,
        STATUS_CHANGE % {"old": current, "to": target},
    )


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
            _("a reason is required to move node %(node)s from %(current)s to %(target)s")
            % {"node": node.name, "current": current, "target": status},
            details={"reason": [_("This field is required.")]},
        )
    before, after = _save_fields(
        node, {"status": status, "status_reason": reason, "taints": _taints_for(node.taints, status)}
    )
    kind, severity, wording = _node_transition_wording(current, status)
    _record(
        node,
        action="node.status_set",
        kind=kind,
        severity=severity,
        message=_reasoned(NODE_CHANGE, NODE_CHANGE_BECAUSE, reason, node=node.name, change=wording),
        before=before,
        after=after,
        actor=actor,
    )
    if before.get("taints") != after.get("taints"):
        from apps.inventory.services.labels import node_push_enqueue

        node_push_enqueue(node)  # the maintenance / quarantine taint reaches Kubernetes
    if status == S.QUARANTINED:
        from apps.inventory.signals import node_quarantined

        # Every way into quarantine (operator, failed gray batch, fault) moves the node's jobs.
        node_quarantined.send(sender=Node, node=node, reason=reason, actor=actor)
    if current == S.QUARANTINED and status == S.READY:
        from apps.inventory.signals import node_released

        node_released.send(sender=Node, node=node, reason=reason, actor=actor)
    if status == S.RETIRED:
        devices = (
            Device.objects.select_for_update()
            .filter(node=node)
            .exclude(health=Device.Health.RETIRED)
            .order_by("pk")
        )
        for device in devices:
            device.node = node
            _device_retire_locked(
                device=device,
                reason=(NODE_RETIRED_BECAUSE % {"node": node.name, "reason": reason})[:300],
                actor=actor,
            )
    return True


def _pool_transition_wording(current: str, target: str) -> tuple[str, str, str]:
    """(event kind, severity, wording) for a device pool status change."""
    P = Device.PoolStatus
    if target == P.QUARANTINE:
        return DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.WARNING, QUARANTINED
    if current == P.QUARANTINE:
        return DeviceEvent.Kind.QUARANTINE, DeviceEvent.Severity.INFO, RELEASED_TO % {"to": target}
    return DeviceEvent.Kind.STATUS_CHANGED, DeviceEvent.Severity.INFO, MOVED_TO % {"to": target}


def _lock_device(device: Device) -> Device:
    return Device.objects.select_for_update(of=("self",)).select_related("node").get(pk=device.pk)


def _active_allocation_jobs(device: Device) -> list[str]:
    """Names of jobs holding an active allocation on the card (scheduling builds on the ledger)."""
    rows = (
        device.allocations.filter(released_at__isnull=True)
        .values_list("job__project__slug", "job__name")
        .distinct()
    )
    return [f"{project}/{name}" for project, name in rows]


def _device_retire_locked(*, device: Device, reason: str, actor) -> bool:
    if device.health == Device.Health.RETIRED:
        return False
    active = _active_allocation_jobs(device)
    if active:
        raise InvalidTransition(
            _(
                "device %(device)s still runs %(count)s job(s) (%(jobs)s); "
                "cancel or move them before retiring the card"
            )
            % {"device": device, "count": len(active), "jobs": ", ".join(active[:5])},
            details={"active_jobs": active},
        )
    # A retired card is in no pool any more: it does not stay "production" (issue 29 §9).
    before, after = _save_fields(
        device,
        {"health": Device.Health.RETIRED, "health_reason": reason, "pool_status": Device.PoolStatus.RETIRED},
    )
    _record(
        device,
        action="device.retire",
        kind=DeviceEvent.Kind.RETIRED,
        severity=DeviceEvent.Severity.WARNING,
        message=_reasoned(DEVICE_RETIRED, DEVICE_RETIRED_BECAUSE, reason, device=device),
        before=before,
        after=after,
        actor=actor,
    )
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
def device_cordon(*, device: Device, cordoned: bool, reason: str = "", actor) -> Device:
    """Cordon one card (no new allocations; running work continues) or lift the cordon.
    Cordoning needs a reason. Idempotent."""
    reason = (reason or "").strip()
    locked = _lock_device(device)
    if locked.cordoned == cordoned:
        return locked
    if cordoned and not reason:
        raise ValidationFailed(
            _("a reason is required to cordon device %(device)s") % {"device": locked},
            details={"reason": [_("This field is required.")]},
        )
    if cordoned and locked.health == Device.Health.RETIRED:
        raise InvalidTransition(
            _("device %(device)s is retired; there is nothing to cordon") % {"device": locked}
        )
    before, after = _save_fields(locked, {"cordoned": cordoned, "cordon_reason": reason if cordoned else ""})
    running = _active_allocation_jobs(locked)
    if not cordoned:
        plain, because = CORDON_LIFTED, CORDON_LIFTED_BECAUSE
    elif running:
        plain, because = CORDONED_RUNNING, CORDONED_RUNNING_BECAUSE
    else:
        plain, because = CORDONED, CORDONED_BECAUSE
    _record(
        locked,
        action="device.cordon" if cordoned else "device.uncordon",
        kind=DeviceEvent.Kind.CORDON,
        severity=DeviceEvent.Severity.WARNING if cordoned else DeviceEvent.Severity.INFO,
        message=_reasoned(plain, because, reason, device=locked, jobs=", ".join(running)),
        before=before,
        after=after,
        actor=actor,
    )
    return locked


@transaction.atomic
def device_pool_status_set(*, device: Device, pool_status: str, reason: str = "", actor) -> Device:
    """Put a card in production, gray (canary) or quarantine. Quarantine needs a reason."""
    P = Device.PoolStatus
    choices = [value for value in P.values if value != P.RETIRED]
    if pool_status == P.RETIRED:
        raise ValidationFailed(
            _("a card leaves the pools only by being retired: retire device %(device)s instead")
            % {"device": device},
            details={"pool_status": [_("Choose one of: %(choices)s.") % {"choices": ", ".join(choices)}]},
        )
    if pool_status not in P.values:
        raise ValidationFailed(
            f"unknown pool status {pool_status!r}",
            details={"pool_status": [f"Choose one of: {', '.join(choices)}."]},
        )
    reason = (reason or "").strip()
    locked = _lock_device(device)
    if locked.health == Device.Health.RETIRED:
        raise InvalidTransition(
            _("device %(device)s is retired; a retired device cannot move to %(target)s")
            % {"device": locked, "target": pool_status},
            details={"health": locked.health, "requested": pool_status},
        )
    current = locked.pool_status
    if pool_status == current:
        return locked
    if pool_status == P.QUARANTINE and not reason:
        raise ValidationFailed(
            _("a reason is required to quarantine device %(device)s") % {"device": locked},
            details={"reason": [_("This field is required.")]},
        )
    before, after = _save_fields(locked, {"pool_status": pool_status})
    kind, severity, wording = _pool_transition_wording(current, pool_status)
    _record(
        locked,
        action="device.pool_status_set",
        kind=kind,
        severity=severity,
        message=_reasoned(
            DEVICE_CHANGE, DEVICE_CHANGE_BECAUSE, reason, device=locked, change=wording, was=current
        ),
        before=before,
        after=after,
        actor=actor,
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
            _("a reason is required to retire device %(device)s") % {"device": locked},
            details={"reason": [_("This field is required.")]},
        )
    _device_retire_locked(device=locked, reason=reason, actor=actor)
    return locked


def _normalise_edit(name: str, value: Any, device: Device) -> Any:
    if name == "owner_project":
        if value is not None and not isinstance(value, Project):
            raise ValidationFailed(
                "owner_project must be a project", details={name: ["Expected a project or null."]}
            )
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
    return (
        getattr(device, f"{name}_id") if name in ("owner_project", "device_model") else getattr(device, name)
    )


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
    validate(locked, what=f"device {locked}")
    after = snapshot(locked, changed)
    diff_fields = [name for name in changed if before[name] != after[name]]
    locked.save(update_fields=[*diff_fields, "updated_at"])
    before = {k: before[k] for k in diff_fields}
    after = {k: after[k] for k in diff_fields}
    _record(
        locked,
        action="device.update",
        kind=DeviceEvent.Kind.UPDATED,
        message=DEVICE_UPDATED % {"device": locked, "fields": ", ".join(diff_fields)},
        before=before,
        after=after,
        actor=actor,
    )
    return locked


# --------------------------------------------------------------------------------------------------
# CSV import


@dataclass
class ImportReport:
    """What an import did (or, with ``dry_run``, would do).

    ``unchanged`` counts existing nodes and devices named in the file that needed no change.
    ``warnings`` and ``rows`` hold ``{"line": n, ...}`` dicts (line 1 is the header); ``rows`` has one
    entry per data line with ``node_action`` (on the node's first line) and ``device_action``, each
    one of created / updated / unchanged / skipped, or "" when the line does not concern it, and
    the names of the fields it changed in ``node_changes`` / ``device_changes``.
    """

    created_nodes: int = 0
    updated_nodes: int = 0
    created_devices: int = 0
    updated_devices: int = 0
    unchanged: int = 0
    warnings: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.created_nodes or self.updated_nodes or self.created_devices or self.updated_devices)

    def as_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["changed"] = self.changed
        return body


@dataclass
class _Row:
    line: int
    cells: dict[str, str]


@dataclass
class _NodePlan:
    cluster: Cluster
    name: str
    line: int
    node: Node | None
    values: dict[str, Any] = field(default_factory=dict)
    value_lines: dict[str, int] = field(default_factory=dict)
    status: str | None = None
    status_line: int = 0
    failed: bool = False
    action: str = "unchanged"


@dataclass
class _DevicePlan:
    line: int
    node_plan: _NodePlan
    vendor: str
    index: int
    values: dict[str, Any]
    device: Device | None = None
    # Rows of retired cards are never written: "unchanged" when they match the ledger, else "skipped".
    frozen: str = ""

    def target(self) -> dict[str, Any]:
        return {"index": self.index, **self.values}


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        return data.removeprefix("\ufeff")
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ValidationFailed(  # pragma: no cover - gb18030 decodes nearly anything
        "the file is neither UTF-8 nor GB18030 text",
        details={"rows": [{"line": 1, "column": "", "message": "bad encoding"}]},
    )


def _unescape(value: str) -> str:
    if len(value) > 1 and value[0] == "'" and value[1] in _FORMULA_PREFIXES + ("'",):
        return value[1:]
    return value


def _escape(value: str) -> str:
    """Defuse spreadsheet formulas (CSV injection); ``_unescape`` reverses it on import. One rule for
    every export: apps.core.exports (OWASP "CSV Injection")."""
    return formula_escape(value)


def _read_csv(text: str) -> tuple[list[_Row], list[dict[str, Any]]]:
    """(data rows, errors). Errors here are about the file's shape."""
    errors: list[dict[str, Any]] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    header_line = 1
    rows: list[_Row] = []
    end = 0
    try:
        for record in reader:
            start, end = end + 1, reader.line_num
            if not any(cell.strip() for cell in record):
                continue
            if header is None:
                header, header_line = [cell.strip().lower() for cell in record], start
                continue
            if len(rows) >= MAX_IMPORT_ROWS:
                errors.append({"line": start, "column": "", "message": f"more than {MAX_IMPORT_ROWS} rows"})
                break
            cells: dict[str, str] = {}
            for position, raw in enumerate(record):
                value = raw.strip()
                name = header[position] if position < len(header) else ""
                if not name:
                    if value:
                        errors.append(
                            {
                                "line": start,
                                "column": f"#{position + 1}",
                                "message": "a value in a column without a header",
                            }
                        )
                    continue
                cells[name] = _unescape(value)
            rows.append(_Row(line=start, cells=cells))
    except csv.Error as exc:
        errors.append({"line": end + 1, "column": "", "message": f"not valid CSV: {exc}"})
    if header is None:
        errors.append({"line": 1, "column": "", "message": "the file is empty: expected a header row"})
        return rows, errors
    seen: set[str] = set()
    for name in header:
        if not name:
            continue
        if name not in EXPORT_COLUMNS:
            errors.append(
                {
                    "line": header_line,
                    "column": name,
                    "message": f"unknown column {name!r}; columns: {', '.join(IMPORT_COLUMNS)}",
                }
            )
        elif name in seen:
            errors.append({"line": header_line, "column": name, "message": f"column {name!r} appears twice"})
        seen.add(name)
    for required in ("cluster", "node"):
        if required not in seen:
            errors.append(
                {
                    "line": header_line,
                    "column": required,
                    "message": f"the required column {required!r} is missing",
                }
            )
    return rows, errors


def _norm(name: str) -> str:
    return " ".join(name.casefold().split())


_VENDORS: dict[str, str] = {v.value: v.value for v in Vendor} | {_norm(str(v.label)): v.value for v in Vendor}


def _max_length(model: type[models.Model], name: str) -> int:
    return model._meta.get_field(name).max_length


class _Importer:
    def __init__(self, *, rows: list[_Row], actor, progress=None) -> None:
        self.rows = rows
        self.actor = actor
        self.progress = progress or (lambda phase, done, total: None)
        self.errors: list[dict[str, Any]] = []
        self.report = ImportReport()
        self.node_plans: dict[tuple[int, str], _NodePlan] = {}
        self.device_plans: list[_DevicePlan] = []
        self.row_results: dict[int, dict[str, Any]] = {}

    # -- collecting --------------------------------------------------------------------------------

    def error(self, line: int, column: str, message: str) -> None:
        self.errors.append({"line": line, "column": column, "message": message})

    def warn(self, line: int, column: str, message: str) -> None:
        self.report.warnings.append({"line": line, "column": column, "message": message})

    def fail(self) -> ValidationFailed:
        errors = sorted(self.errors, key=lambda e: (e["line"], e["column"]))
        bad = len({e["line"] for e in errors})
        noun = "row has" if bad == 1 else "rows have"
        return ValidationFailed(f"{bad} {noun} errors", details={"rows": errors})

    # -- reference data and locks ------------------------------------------------------------------

    def load(self) -> None:
        def values(column: str) -> set[str]:
            return {r.cells[column] for r in self.rows if r.cells.get(column)}

        self.clusters = {c.slug: c for c in Cluster.objects.filter(slug__in=values("cluster"))}
        self.pools = {
            (p.cluster_id, p.slug): p
            for p in Pool.objects.filter(cluster__in=self.clusters.values(), slug__in=values("pool"))
        }
        self.projects = {p.slug: p for p in Project.objects.filter(slug__in=values("owner_project"))}
        self.models: dict[str, list[DeviceModel]] = {}
        if values("device_model"):
            for dm in DeviceModel.objects.order_by("vendor", "name"):
                names = [dm.name, dm.slug, *(p for p in dm.product_names or [] if isinstance(p, str))]
                for key in dict.fromkeys(_norm(n) for n in names):
                    self.models.setdefault(key, []).append(dm)
        # Lock what the file can touch: nodes first, then devices, each in primary-key order.
        nodes = (
            Node.objects.select_for_update()
            .filter(cluster__in=self.clusters.values(), name__in=values("node"))
            .order_by("pk")
        )
        self.nodes = {(n.cluster_id, n.name): n for n in nodes}
        devices = (
            Device.objects.select_for_update(of=("self",))
            .select_related("node")
            .filter(Q(uuid__in=values("uuid")) | Q(node__in=list(self.nodes.values())))
            .order_by("pk")
        )
        self.by_uuid: dict[str, Device] = {}
        self.in_service: dict[tuple[int, str, int], Device] = {}
        self.out_of_service: dict[tuple[int, str, int, str], Device] = {}
        for d in devices:
            if d.uuid:
                self.by_uuid[d.uuid] = d
            if d.health in _OUT_OF_SERVICE:
                self.out_of_service[(d.node_id, d.vendor, d.index, d.health)] = d  # newest wins
            else:
                self.in_service[(d.node_id, d.vendor, d.index)] = d

    # -- validation --------------------------------------------------------------------------------

    def _text(self, row: _Row, column: str, model: type[models.Model], field_name: str | None = None) -> str:
        value = row.cells.get(column, "")
        limit = _max_length(model, field_name or column)
        if len(value) > limit:
            self.error(row.line, column, f"longer than {limit} characters")
            return ""
        return value

    def _integer(self, row: _Row, column: str, *, minimum: int | None = None) -> int | None:
        value = row.cells.get(column, "")
        if not value:
            return None
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or (minimum is not None and number < minimum):
            floor = f" >= {minimum}" if minimum is not None else ""
            self.error(row.line, column, f"{value!r} is not a whole number{floor}")
            return None
        return number

    def validate(self) -> None:
        seen_uuid: dict[str, int] = {}
        seen_slot: dict[tuple[str, str, str, int], int] = {}
        matched: dict[int, int] = {}
        for i, row in enumerate(self.rows):
            if i % 100 == 0:
                self.progress(VALIDATING, i, len(self.rows))
            plan = self._validate_node(row)
            if not any(row.cells.get(c) for c in _DEVICE_COLUMNS):
                self.row_results[row.line] = self._row_result(row, "")
                continue
            self._validate_device(row, plan, seen_uuid, seen_slot, matched)

    def _row_result(self, row: _Row, device: str) -> dict[str, Any]:
        return {
            "line": row.line,
            "cluster": row.cells.get("cluster", ""),
            "node": row.cells.get("node", ""),
            "device": device,
            "node_action": "",
            "device_action": "",
            "node_changes": [],
            "device_changes": [],
        }

    def _validate_node(self, row: _Row) -> _NodePlan | None:
        c, line = row.cells, row.line
        cluster = None
        if not c.get("cluster"):
            self.error(line, "cluster", "required")
        else:
            cluster = self.clusters.get(c["cluster"])
            if cluster is None:
                self.error(line, "cluster", f"no cluster with slug {c['cluster']!r}")
        name = self._text(row, "node", Node, "name")
        if not c.get("node"):
            self.error(line, "node", "required")
        status = c.get("node_status", "").lower() or None
        if status and status not in S.values:
            self.error(
                line, "node_status", f"{c['node_status']!r} is not a node status ({', '.join(S.values)})"
            )
            status = None
        values: dict[str, Any] = {}
        for column in _NODE_TEXT_COLUMNS:
            if c.get(column):
                values[column] = self._text(row, column, Node)
        if c.get("pool") and cluster is not None:
            pool = self.pools.get((cluster.pk, c["pool"]))
            if pool is None:
                self.error(line, "pool", f"no pool {c['pool']!r} in cluster {cluster.slug}")
            else:
                values["pool"] = pool
        if cluster is None or not name:
            return None
        key = (cluster.pk, name)
        plan = self.node_plans.get(key)
        if plan is None:
            plan = self.node_plans[key] = _NodePlan(
                cluster=cluster, name=name, line=line, node=self.nodes.get(key)
            )
        for column, value in values.items():
            previous = plan.values.get(column)
            if column in plan.values and previous != value:
                self.error(
                    line,
                    column,
                    f"node {name}: {column} {str(value)!r} disagrees with {str(previous)!r} on line {plan.value_lines[column]}",
                )
            elif column not in plan.values:
                plan.values[column], plan.value_lines[column] = value, line
        if status:
            if plan.status and plan.status != status:
                self.error(
                    line,
                    "node_status",
                    f"node {name}: {status!r} disagrees with {plan.status!r} on line {plan.status_line}",
                )
            elif not plan.status:
                if plan.node is not None and (problem := _node_transition_error(plan.node, status)):
                    self.error(line, "node_status", problem)
                else:
                    plan.status, plan.status_line = status, line
        return plan

    def _device_model(self, row: _Row, vendor: str | None, values: dict[str, Any]) -> None:
        name = row.cells.get("device_model", "")
        if not name:
            return
        candidates = self.models.get(_norm(name), [])
        if vendor is None:
            return
        same_vendor = [m for m in candidates if m.vendor == vendor]
        if same_vendor:
            exact = [m for m in same_vendor if m.name == name]
            values["device_model"] = (exact or same_vendor)[0]
            values["model_unrecognized"] = False
        elif candidates:
            self.error(
                row.line,
                "device_model",
                f"{name!r} is a {candidates[0].vendor} model, but the row's vendor is {vendor}",
            )
        else:
            limit = _max_length(Device, "raw_model_name")
            if len(name) > limit:
                self.error(row.line, "device_model", f"longer than {limit} characters")
                return
            values.update(device_model=None, raw_model_name=name, model_unrecognized=True)
            self.warn(
                row.line,
                "device_model",
                f"device model {name!r} is not in the catalog; recorded as unrecognized",
            )

    def _validate_device(
        self,
        row: _Row,
        plan: _NodePlan | None,
        seen_uuid: dict[str, int],
        seen_slot: dict[tuple[str, str, str, int], int],
        matched: dict[int, int],
    ) -> None:
        c, line = row.cells, row.line
        errors_before = len(self.errors)
        vendor = None
        if not c.get("vendor"):
            self.error(line, "vendor", "required on a device row")
        else:
            vendor = _VENDORS.get(_norm(c["vendor"]))
            if vendor is None:
                self.error(
                    line, "vendor", f"{c['vendor']!r} is not a catalog vendor ({', '.join(Vendor.values)})"
                )
        index = self._integer(row, "device_index", minimum=0)
        if not c.get("device_index"):
            self.error(line, "device_index", "required on a device row")
        values: dict[str, Any] = {}
        numa = self._integer(row, "numa_node")
        if numa is not None:
            values["numa_node"] = numa
        for column in _DEVICE_TEXT_COLUMNS:
            if c.get(column):
                values[column] = self._text(row, column, Device)
        if values.get("pci_bus_id"):
            # The form the vendors' tools print and every report stores ("0000:1A:00.0"): a value
            # that is no PCI address would match nothing the cluster publishes (issue 29 §9).
            try:
                values["pci_bus_id"] = normalise_pci_bus_id(values["pci_bus_id"])
            except ValueError:
                self.error(
                    line,
                    "pci_bus_id",
                    f"{c['pci_bus_id']!r} is not a PCI address (domain:bus:device.function, e.g. 0000:1A:00.0)",
                )
                del values["pci_bus_id"]
        if c.get("owner_project"):
            project = self.projects.get(c["owner_project"])
            if project is None:
                self.error(line, "owner_project", f"no project with slug {c['owner_project']!r}")
            else:
                values["owner_project"] = project
        self._device_model(row, vendor, values)
        label = f"{c.get('vendor', '')}#{c.get('device_index', '')}"
        result = self._row_result(row, label)
        self.row_results[line] = result
        uuid = values.get("uuid", "")
        if uuid:
            if uuid in seen_uuid:
                self.error(line, "uuid", f"uuid {uuid} already appears on line {seen_uuid[uuid]}")
            else:
                seen_uuid[uuid] = line
        health = c.get("health", "").lower()
        if vendor and index is not None and health not in _OUT_OF_SERVICE:
            slot = (c.get("cluster", ""), c.get("node", ""), vendor, index)
            if slot in seen_slot:
                self.error(
                    line,
                    "device_index",
                    f"{vendor} index {index} on node {slot[1]} already appears on line {seen_slot[slot]}",
                )
            else:
                seen_slot[slot] = line
        if len(self.errors) > errors_before or plan is None or vendor is None or index is None:
            return
        device_plan = _DevicePlan(line=line, node_plan=plan, vendor=vendor, index=index, values=values)
        self._match(row, device_plan, health, matched)

    def _match(self, row: _Row, dp: _DevicePlan, health: str, matched: dict[int, int]) -> None:
        line, node, name = row.line, dp.node_plan.node, dp.node_plan.name
        uuid = dp.values.get("uuid", "")
        device = self.by_uuid.get(uuid) if uuid else None
        if device is not None:
            if node is None or device.node_id != node.pk:
                self.error(
                    line,
                    "uuid",
                    f"uuid {uuid} belongs to device {device} on another node ({device.node.name})",
                )
                return
            if device.vendor != dp.vendor:
                self.error(line, "vendor", f"uuid {uuid} is a {device.vendor} card, not {dp.vendor}")
                return
        elif node is not None:
            if health in _OUT_OF_SERVICE:
                device = self.out_of_service.get((node.pk, dp.vendor, dp.index, health))
            else:
                device = self.in_service.get((node.pk, dp.vendor, dp.index))
                if device is not None and uuid and device.uuid and device.uuid != uuid:
                    self.error(
                        line,
                        "uuid",
                        f"{dp.vendor} index {dp.index} on node {name} holds the card with uuid {device.uuid}; "
                        f"retire it before registering {uuid} in its slot",
                    )
                    return
        if device is not None:
            device.node = node
            if device.pk in matched:
                self.error(
                    line, "uuid" if uuid else "device_index", f"the same card as line {matched[device.pk]}"
                )
                return
            matched[device.pk] = line
        dp.device = device
        if health == Device.Health.RETIRED or (device is not None and device.health == Device.Health.RETIRED):
            if device is None or device.health != Device.Health.RETIRED or self._diff(device, dp.target()):
                self.warn(line, "health", "rows of retired cards are not imported; row skipped")
                dp.frozen = "skipped"
            else:
                dp.frozen = "unchanged"
            self.device_plans.append(dp)
            return
        if device is None and health == Device.Health.LOST:
            self.warn(line, "health", "no lost card in this slot; row skipped")
            dp.frozen = "skipped"
            self.device_plans.append(dp)
            return
        if device is not None and device.index != dp.index:
            holder = self.in_service.get((node.pk, dp.vendor, dp.index))
            if holder is not None and holder.pk != device.pk and device.health not in _OUT_OF_SERVICE:
                self.error(
                    line,
                    "device_index",
                    f"{dp.vendor} index {dp.index} on node {name} is held by another card (uuid {holder.uuid or 'none'})",
                )
                return
        if device is None and node is not None and node.status == S.RETIRED:
            self.error(line, "node", f"node {name} is retired; no card can be added to it")
            return
        self.device_plans.append(dp)

    @staticmethod
    def _diff(obj: models.Model, values: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """Fields whose stored value differs from ``values`` (foreign keys compared by id)."""
        changes = {}
        for name, new in values.items():
            if isinstance(obj._meta.get_field(name), models.ForeignKey):
                old, new = getattr(obj, f"{name}_id"), (new.pk if new is not None else None)
            else:
                old = getattr(obj, name)
            if old != new:
                changes[name] = (old, new)
        return changes

    # -- writing -----------------------------------------------------------------------------------

    def apply(self) -> None:
        for plan in sorted(self.node_plans.values(), key=lambda p: p.line):
            try:
                self._apply_node(plan)
            except ValidationFailed as exc:
                plan.failed = True
                self.error(plan.line, "node", exc.message)
        for i, dp in enumerate(self.device_plans):
            if i % 100 == 0:
                self.progress(WRITING, i, len(self.device_plans))
            if dp.node_plan.failed:
                continue
            try:
                self._apply_device(dp)
            except ValidationFailed as exc:
                self.error(dp.line, "", exc.message)
        for plan in sorted(self.node_plans.values(), key=lambda p: p.status_line):
            node = plan.node
            if plan.failed or not plan.status or node is None or node.status == plan.status:
                continue
            try:
                _node_transition_locked(
                    node=node,
                    status=plan.status,
                    reason=IMPORT_STATUS_REASON % {"line": plan.status_line},
                    actor=self.actor,
                )
            except (ValidationFailed, InvalidTransition) as exc:
                self.error(plan.status_line, "node_status", exc.message)
                continue
            if plan.action != "created":
                plan.action = "updated"
                self.row_results[plan.line]["node_changes"].append("status")
        for plan in self.node_plans.values():
            self.row_results[plan.line]["node_action"] = plan.action
            if plan.action == "created":
                self.report.created_nodes += 1
            elif plan.action == "updated":
                self.report.updated_nodes += 1
            else:
                self.report.unchanged += 1
        self.report.rows = [self.row_results[line] for line in sorted(self.row_results)]

    def _apply_node(self, plan: _NodePlan) -> None:
        fields = list(plan.values)
        if plan.node is None:
            # A node imported as retired is created ready and retired after its cards are imported,
            # so the retirement reaches its cards (each with its own event) like any other.
            status = plan.status if plan.status and plan.status != S.RETIRED else S.READY
            node = Node(
                cluster=plan.cluster,
                name=plan.name,
                status=status,
                taints=_taints_for([], status),
                **plan.values,
            )
            validate_and_save(node, what=f"node {plan.name}")
            plan.node, plan.action = node, "created"
            _record(
                node,
                action="node.import",
                kind=DeviceEvent.Kind.IMPORTED,
                message=NODE_IMPORTED % {"node": node.name, "line": plan.line},
                after=snapshot(node, ["cluster", "name", "status", "taints", *fields]),
                actor=self.actor,
            )
            return
        node = plan.node
        changes = self._diff(node, plan.values)
        if not changes:
            return
        before, after = _save_fields(node, {name: plan.values[name] for name in changes})
        _record(
            node,
            action="node.update",
            kind=DeviceEvent.Kind.UPDATED,
            message=NODE_IMPORT_UPDATED
            % {"node": node.name, "line": plan.line, "fields": ", ".join(changes)},
            before=before,
            after=after,
            actor=self.actor,
        )
        plan.action = "updated"
        self.row_results[plan.line]["node_changes"] = list(changes)

    def _apply_device(self, dp: _DevicePlan) -> None:
        result = self.row_results[dp.line]
        node = dp.node_plan.node
        if dp.frozen:
            result["device_action"] = dp.frozen
            if dp.frozen == "unchanged":
                self.report.unchanged += 1
            return
        if dp.device is None:
            device = Device(node=node, vendor=dp.vendor, index=dp.index, **dp.values)
            validate_and_save(device, what=f"device {dp.vendor}#{dp.index} on node {node.name}")
            _record(
                device,
                action="device.import",
                kind=DeviceEvent.Kind.IMPORTED,
                message=DEVICE_IMPORTED % {"device": device, "line": dp.line},
                after=snapshot(device, ["vendor", *_DEVICE_IMPORT_FIELDS]),
                actor=self.actor,
            )
            self.report.created_devices += 1
            result["device_action"] = "created"
            return
        device = dp.device
        changes = self._diff(device, dp.target())
        if not changes:
            self.report.unchanged += 1
            result["device_action"] = "unchanged"
            return
        values = dp.target()
        before, after = _save_fields(device, {name: values[name] for name in changes})
        _record(
            device,
            action="device.update",
            kind=DeviceEvent.Kind.UPDATED,
            message=DEVICE_IMPORT_UPDATED % {"device": device, "line": dp.line, "fields": ", ".join(changes)},
            before=before,
            after=after,
            actor=self.actor,
        )
        self.report.updated_devices += 1
        result["device_action"] = "updated"
        result["device_changes"] = list(changes)


def ledger_import_csv(*, data: bytes | str, actor, dry_run: bool = False, progress=None) -> ImportReport:
    """Import nodes and devices from a ledger CSV (columns and rules: see the module docstring).

    All rows are validated against the locked ledger before anything is written; any error raises
    ``ValidationFailed`` with ``details["rows"]`` and writes nothing. With ``dry_run`` the whole
    import runs and is rolled back, so the report says exactly what a real import would do.
    """
    rows, errors = _read_csv(_decode(data))
    if errors:
        bad = len({e["line"] for e in errors})
        raise ValidationFailed(
            f"{bad} {'row has' if bad == 1 else 'rows have'} errors", details={"rows": errors}
        )
    try:
        with transaction.atomic():
            importer = _Importer(rows=rows, actor=actor, progress=progress)
            importer.load()
            importer.validate()
            if importer.errors:
                raise importer.fail()
            importer.apply()
            if importer.errors:
                raise importer.fail()
            report = importer.report
            report.dry_run = dry_run
            if dry_run:
                transaction.set_rollback(True)
    except IntegrityError as exc:
        raise Conflict(_("the ledger changed while the file was being imported; import it again")) from exc
    return report


# Files with more rows than this are imported by a worker, with a progress page.
BACKGROUND_IMPORT_ROWS = 500


# The BackgroundRun kind of a queued import, and the task that runs it.
IMPORT_RUN_KIND = "inventory.ledger_import"
IMPORT_TASK = "worker.tasks.inventory.ledger_import_task"


def ledger_import_request(*, data: bytes | str, actor, dry_run: bool = False) -> BackgroundRun:
    """Queue a (large) ledger import for a worker; the same rules and report as ``ledger_import_csv``.

    The run keeps the file in ``params["text"]``; its ``result`` gets ``report`` (done) or ``errors``
    (the rows that failed)."""
    text = _decode(data)
    with transaction.atomic():
        run = runs.run_create(
            kind=IMPORT_RUN_KIND,
            actor=actor,
            params={"text": text, "dry_run": dry_run, "rows": max(0, text.count("\n") - 1)},
        )
        change_record_create(
            actor=actor, action="inventory.ledger_import_request", obj=run, after={"dry_run": dry_run}
        )
        runs.run_enqueue(run=run, task=IMPORT_TASK)
    return run


def ledger_import_run(*, run_id: int, actor=None) -> BackgroundRun | None:
    """Run a queued import once (queued → running is a conditional update); record the outcome."""
    run = runs.run_start(run_id=run_id, kind=IMPORT_RUN_KIND)
    if run is None:
        return None

    def progress(phase: str, done: int, total: int) -> None:
        runs.run_progress(run=run, done=done, total=total, message=phase)

    params = run.params
    try:
        report = ledger_import_csv(
            data=params.get("text", ""),
            actor=actor or run.actor or run.actor_label or "worker",
            dry_run=bool(params.get("dry_run")),
            progress=progress,
        )
    except ApplicationError as exc:
        details = exc.details if isinstance(exc.details, dict) else {}
        runs.run_fail(
            run=run,
            error=exc.message,
            result={"errors": details.get("rows") or [{"line": "", "column": "", "message": exc.message}]},
        )
    except Exception:
        # A bug, not the file: the run must not poll forever; the worker log has the traceback.
        runs.run_fail(run=run, error="the import stopped on an unexpected error; see the worker log")
        raise
    else:
        runs.run_finish(run=run, result={"report": report.as_dict()})
    run.refresh_from_db()
    return run


# --------------------------------------------------------------------------------------------------
# export

CSV_CONTENT_TYPE = "text/csv; charset=utf-8"
XLSX_CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _export_row(device: Device) -> dict[str, Any]:
    node = device.node
    return {
        "cluster": node.cluster.slug,
        "pool": node.pool.slug if node.pool_id else "",
        "node": node.name,
        "node_status": node.status,
        **{name: getattr(node, name) for name in _NODE_TEXT_COLUMNS},
        "vendor": device.vendor,
        "device_index": device.index,
        "device_model": device.device_model.name if device.device_model_id else device.raw_model_name,
        "uuid": device.uuid or "",
        "serial": device.serial,
        "pci_bus_id": device.pci_bus_id,
        "numa_node": device.numa_node,
        "firmware_version": device.firmware_version,
        "owner_project": device.owner_project.slug if device.owner_project_id else "",
        "topology_group": device.topology_group,
        "health": device.health,
        "pool_status": device.pool_status,
        "model_unrecognized": device.model_unrecognized,
        "last_seen_at": timezone.localtime(device.last_seen_at).isoformat() if device.last_seen_at else "",
    }


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return _escape(str(value))


def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _xlsx_bytes(rows: list[dict[str, Any]]) -> bytes:
    from openpyxl import Workbook
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "ledger"
    sheet.append(list(EXPORT_COLUMNS))
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    widths = [_display_width(name) for name in EXPORT_COLUMNS]
    for row in rows:
        values = []
        for position, name in enumerate(EXPORT_COLUMNS):
            value = row[name]
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, str):
                value = ILLEGAL_CHARACTERS_RE.sub("", value)
            values.append(value)
            widths[position] = max(widths[position], _display_width("" if value is None else str(value)))
        # Text is text: never let a value that starts with "=" become a formula.
        xlsx_append(sheet, values)
    for position, width in enumerate(widths, start=1):
        sheet.column_dimensions[get_column_letter(position)].width = min(max(width, 6), 60) + 2
    sheet.freeze_panes = "A2"
    sheet.auto_filter.ref = sheet.dimensions
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def ledger_export(*, devices: QuerySet[Device], fmt: str) -> tuple[bytes, str, str]:
    """Export devices in the import's columns plus the read-only ones: (content, content type, filename).

    ``fmt`` is "csv" (UTF-8 with BOM, so Excel shows Chinese text; formula-like cells are prefixed
    with ``'``) or "xlsx" (bold frozen header, fitted widths). An export re-imports unchanged.
    """
    fmt = (fmt or "").lower()
    if fmt not in ("csv", "xlsx"):
        raise ValidationFailed(f"unknown export format {fmt!r}", details={"format": ["Choose csv or xlsx."]})
    queryset = devices.select_related(
        "node", "node__cluster", "node__pool", "device_model", "owner_project"
    ).order_by("node__cluster__slug", "node__name", "vendor", "index", "pk")
    rows = [_export_row(device) for device in queryset]
    filename = f"suanchi-ledger-{timezone.localtime():%Y%m%d-%H%M%S}.{fmt}"
    if fmt == "xlsx":
        return _xlsx_bytes(rows), XLSX_CONTENT_TYPE, filename
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(EXPORT_COLUMNS)
    for row in rows:
        writer.writerow([_csv_cell(row[name]) for name in EXPORT_COLUMNS])
    return buffer.getvalue().encode("utf-8-sig"), CSV_CONTENT_TYPE, filename
