"""Ledger (台账) state changes: node status, device cordon / pool status / retirement / edits.

Every state change here locks its rows (``select_for_update``), re-reads the state inside the lock,
validates through ``apps.core.validation`` and writes both a ``DeviceEvent`` (the ledger history operators read)
and a ``core.ChangeRecord`` (the audit trail). Asking for the state a row is already in is a no-op
and writes no event.
"""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from django.utils.translation import gettext as _

from apps.accounts.models import Project
from apps.catalog.models import DeviceModel
from apps.core.audit import snapshot
from apps.core.errors import InvalidTransition, ValidationFailed
from apps.core.validation import validate
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger.common import (
    CORDON_LIFTED,
    CORDON_LIFTED_BECAUSE,
    CORDONED,
    CORDONED_BECAUSE,
    CORDONED_RUNNING,
    CORDONED_RUNNING_BECAUSE,
    DEVICE_CHANGE,
    DEVICE_CHANGE_BECAUSE,
    DEVICE_EDITABLE_FIELDS,
    DEVICE_RETIRED,
    DEVICE_RETIRED_BECAUSE,
    DEVICE_UPDATED,
    MAINTENANCE_OFF,
    MAINTENANCE_ON,
    MOVED_TO,
    NODE_CHANGE,
    NODE_CHANGE_BECAUSE,
    NODE_RETIRED_BECAUSE,
    NODE_TRANSITIONS,
    QUARANTINED,
    RELEASED_FROM_QUARANTINE,
    RELEASED_TO,
    RETIRED,
    STATUS_CHANGE,
    S,
    _reasoned,
    _record,
    _save_fields,
    _taints_for,
)


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


def node_status_set(*, node: Node, status: str, reason: str = "", actor) -> Node:
    """Move a node through its state machine (see ``NODE_TRANSITIONS``) and keep its taints in step.

    Releasing a quarantined node and retiring a node need a reason; retiring a node retires all
    its cards in service, each with its own event. The ledger only: what a quarantine or a release
    means for the jobs on the node is ``apps.scheduling.faults.node_status_change`` (which callers
    above the ledger call instead).
    """
    return node_status_move(node=node, status=status, reason=reason, actor=actor)[0]


@transaction.atomic
def node_status_move(*, node: Node, status: str, reason: str = "", actor) -> tuple[Node, str | None]:
    """``node_status_set``, telling what happened: (the locked node, its previous status when it
    moved, else None)."""
    if status not in S.values:
        raise ValidationFailed(
            f"unknown node status {status!r}", details={"status": [f"Choose one of: {', '.join(S.values)}."]}
        )
    reason = (reason or "").strip()
    locked = Node.objects.select_for_update().get(pk=node.pk)
    previous = locked.status
    moved = _node_transition_locked(node=locked, status=status, reason=reason, actor=actor)
    return locked, (previous if moved else None)


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
