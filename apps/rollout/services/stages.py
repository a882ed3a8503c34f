"""What every gray-batch write shares: the stage diagram's actions (``BATCH_ACTIONS``), the locked,
conditional stage move with its audit record (``_move``), audited field changes, and the gray label and
taint on a batch's nodes (``node_gray_mark`` / ``node_gray_clear``, pushed through the outbox)."""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.clusters.outbox import node_patch_enqueue
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import Conflict, InvalidTransition, ValidationFailed
from apps.core.validation import validate_and_save
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger.events import device_event_create
from apps.rollout.models import (
    GrayBatch,
)
from apps.rollout.services.texts import JOINS, LEAVES

GRAY_KEY = "suanchi.io/gray"
GRAY_TAINT = {"key": GRAY_KEY, "value": "true", "effect": "NoSchedule"}
Stage = GrayBatch.Stage
_IN_SERVICE_EXCLUDED = (Device.Health.RETIRED, Device.Health.LOST)
# The stage changes of the diagram above, by the stages they start from (the batch page offers
# these; each service still refuses a batch in another stage with a 409).
BATCH_ACTIONS: dict[str, tuple[str, ...]] = {
    "start_soak": (Stage.PLANNED,),
    "evaluate": (Stage.SOAKING,),
    "admit": (Stage.PASSED,),
    "fail": (Stage.SOAKING, Stage.PASSED),
    "rollback": (Stage.SOAKING, Stage.PASSED, Stage.FAILED),
}


def batch_actions(batch: GrayBatch) -> list[str]:
    """The stage changes that apply to ``batch`` now, in the diagram's order."""
    return [name for name, stages in BATCH_ACTIONS.items() if batch.stage in stages]


def _save_changes(
    obj: models.Model, changes: dict[str, Any], fields: tuple[str, ...], *, what: str, action: str, actor
) -> None:
    """Apply ``changes`` to a locked row, validate, save and audit them (before / after snapshots)."""
    before = snapshot(obj, list(fields))
    _set_fields(obj, changes, fields)
    validate_and_save(obj, what=what)
    change_record_create(
        actor=actor, action=action, obj=obj, before=before, after=snapshot(obj, list(fields))
    )


def _set_fields(obj: models.Model, changes: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValidationFailed(
            _("cannot change %(fields)s") % {"fields": ", ".join(unknown)},
            details={k: [_("This field cannot be changed.")] for k in unknown},
        )
    for name, value in changes.items():
        setattr(obj, name, value)


def _lock_batch(batch: GrayBatch) -> GrayBatch:
    return (
        GrayBatch.objects.select_for_update(of=("self",))
        .select_related("criteria", "baseline_run")
        .get(pk=batch.pk)
    )


def _move(
    batch: GrayBatch, *, to: str, expected: tuple[str, ...], reason: str, actor, note: str = "", **fields
) -> None:
    """Conditional stage update on a locked batch; 409 with the reason when it is in another stage.
    The audit record's message is the operator's ``note`` when one was given, else the stage reason."""
    if batch.stage not in expected:
        raise InvalidTransition(
            _("batch %(batch)s is %(stage)s; it must be %(expected)s to become %(to)s")
            % {
                "batch": batch.name,
                "stage": batch.get_stage_display(),
                "expected": _(" or ").join(str(Stage(s).label) for s in expected),
                "to": Stage(to).label,
            },
            details={"stage": batch.stage, "requested": to},
        )
    before = snapshot(batch, ["stage", "stage_reason"])
    updated = GrayBatch.objects.filter(pk=batch.pk, stage=batch.stage).update(
        stage=to, stage_reason=reason[:500], updated_at=timezone.now(), **fields
    )
    if updated != 1:  # pragma: no cover - the row is locked; kept as the conditional-update backstop
        raise Conflict(_("batch %(batch)s changed meanwhile; try again") % {"batch": batch.name})
    batch.refresh_from_db()
    change_record_create(
        actor=actor,
        action=f"graybatch.{to}",
        obj=batch,
        before=before,
        after=snapshot(batch, ["stage", "stage_reason"]),
        message=note or reason,
    )


def _nodes(batch: GrayBatch) -> list[Node]:
    return list(batch.nodes.select_related("cluster").order_by("pk"))


def _in_service(node: Node) -> list[Device]:
    return list(Device.objects.filter(node=node).exclude(health__in=_IN_SERVICE_EXCLUDED).order_by("pk"))


def _node_labels_record(node: Node, before: dict, actor, message: str) -> None:
    after = {"labels": node.labels, "taints": node.taints}
    device_event_create(
        node=node,
        kind=DeviceEvent.Kind.UPDATED,
        message=message[:500],
        before=before,
        after=after,
        actor_label=actor_fields(actor)["actor_label"][:150],
    )
    change_record_create(
        actor=actor, action="node.labels", obj=node, before=before, after=after, message=message
    )


@transaction.atomic
def node_gray_mark(*, node: Node, batch: GrayBatch, actor) -> Node:
    """Label and taint a node as part of a gray batch; pushed to Kubernetes through the outbox."""
    locked = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node.pk)
    labels = dict(locked.labels or {})
    taints = [t for t in (locked.taints or []) if t.get("key") != GRAY_KEY]
    if labels.get(GRAY_KEY) == batch.slug and len(taints) < len(locked.taints or []):
        return locked
    before = {"labels": locked.labels, "taints": locked.taints}
    labels[GRAY_KEY] = batch.slug
    locked.labels, locked.taints = labels, [*taints, dict(GRAY_TAINT)]
    locked.save(update_fields=["labels", "taints", "updated_at"])
    _node_labels_record(locked, before, actor, JOINS % {"node": locked.name, "batch": batch.name})
    node_patch_enqueue(locked)
    return locked


@transaction.atomic
def node_gray_clear(*, node: Node, batch: GrayBatch, actor) -> Node:
    """Remove the gray label and taint (only when they name this batch); pushed through the outbox."""
    locked = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node.pk)
    labels = dict(locked.labels or {})
    if labels.get(GRAY_KEY) not in (None, batch.slug):
        return locked  # another batch owns the node now
    taints = [t for t in (locked.taints or []) if t.get("key") != GRAY_KEY]
    if GRAY_KEY not in labels and len(taints) == len(locked.taints or []):
        return locked
    before = {"labels": locked.labels, "taints": locked.taints}
    labels.pop(GRAY_KEY, None)
    locked.labels, locked.taints = labels, taints
    locked.save(update_fields=["labels", "taints", "updated_at"])
    _node_labels_record(locked, before, actor, LEAVES % {"node": locked.name, "batch": batch.name})
    node_patch_enqueue(locked, removed_labels=(GRAY_KEY,))
    return locked
