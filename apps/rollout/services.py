"""Rollout writes: soak criteria, gray-release batches through their stages, benchmark runs, upgrade
plans and waves, autoscaling policies and their decisions.

Stages of a gray batch::

    planned ──start soak──▶ soaking ──evaluate──▶ passed ──admit──▶ admitted
                               │                     │
                               └──evaluate / fail──▶ failed
    soaking / passed / failed ──rollback──▶ rolled back

* Starting a soak puts the cards of the batch's nodes in the gray pool (``device_pool_status_set``)
  and marks each node with the ``suanchi.io/gray=<batch>`` label and a ``suanchi.io/gray`` NoSchedule
  taint, pushed to Kubernetes through the outbox: only jobs that opted in (and tolerate it) land there.
* ``batch_evaluate`` computes a ``SoakResult`` from telemetry and device events (never typed in):
  any violated limit fails the batch at once; it passes when the soak time, telemetry coverage and
  benchmark evidence are all there.
* A card that is already unhealthy when the soak starts (lost, degraded, or cordoned for a hardware
  fault) is left out of the batch: it stays out of the gray pool, an event on the card says why, and
  the batch keeps it in ``excluded_devices``. The soak judges only what happens during it: a loss
  counts when it happens inside the soak window, on a card that was in the batch.
* Admitting (only a passed batch) moves the cards to production and removes label and taint;
  failing quarantines the nodes and their cards (``suanchi.io/quarantine=true:NoExecute``).
* Rolling back means the change was reverted on the nodes: gray cards return to production, label
  and taint go, and a node that this batch's failure quarantined is released — with the cards the
  failure quarantined — when that failure is the only reason it is quarantined. It stays quarantined
  when something else holds it: another reason on the node (an operator's, Kubernetes NotReady), or
  a node-level hardware fault (``faults.NODE_FAULT_INCIDENTS`` separate card faults). The rollback's
  stage reason and an event on the node say which nodes stay and why; the batch page offers the
  release (``batch_node_release``, staff, with a reason). A platform team reverts a change to get the
  node back: keeping a node out after the cause is gone only strands capacity (on the demo, the T4
  cards a migration rollback then missed), while card-level containment (lost cards, fault cordons)
  stays in place either way.
* A batch that belongs to an upgrade wave starts only after every earlier layer's wave of the plan
  passed (seed 000 §5: collector / device plugin → scheduler → node drivers).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.benchlib.services import measurement_from_benchmark_run
from apps.clusters.outbox import node_patch_enqueue
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import ApplicationError, Conflict, InvalidTransition, ValidationFailed
from apps.core.stored_text import localize, stored
from apps.core.validation import validate, validate_and_save
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger import device_pool_status_set, node_status_set
from apps.jobs.models import Job, JobState
from apps.rollout import autoscale, selectors
from apps.rollout.models import (
    LAYER_OF_KIND,
    AutoscalePolicy,
    BenchmarkRun,
    GrayBatch,
    Layer,
    ScaleDecision,
    SoakCriteria,
    SoakResult,
    UpgradePlan,
    UpgradeWave,
)
from apps.scheduling.faults import FAULT_CORDON_PREFIX, NODE_FAULT_INCIDENTS, node_fault_incidents

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


# --------------------------------------------------------------------------------------------------
# helpers


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


# --------------------------------------------------------------------------------------------------
# node labels and taints


# Texts people read later (events, stage reasons), in their own language (apps.core.stored_text).
JOINS = stored("node %(node)s joins gray batch %(batch)s")
LEAVES = stored("node %(node)s leaves gray batch %(batch)s")
GRAY_REASON = stored("gray batch %(batch)s: %(kind)s %(version)s")
SOAK_STARTED = stored("soak started on %(count)s node(s)")
SOAK_FAILED = stored("soak failed: %(violations)s")
SOAK_PASSED_AFTER = stored("soak passed after %(hours)s h")
SOAK_PASSED = stored("soak passed")
ADMITTED = stored("gray batch %(batch)s admitted")
AUTOSCALE = stored("autoscale: %(reason)s")
AUTOSCALE_DISABLED = stored("disabled")
SERVICE_IS = stored("the service is %(state)s")
AUTOSCALE_NO_ROOM = stored("no room for another replica (asked %(asked)s)")
BATCH_FAILED = stored("gray batch %(batch)s failed: %(reason)s")
BATCH_ROLLED_BACK = stored("gray batch %(batch)s rolled back: %(reason)s")
# Cards left out of a batch at the start of its soak (unhealthy before it began).
SOAK_STARTED_LEFT_OUT = stored(
    "soak started on %(count)s node(s); %(left)s card(s) left out, unhealthy before the soak: %(cards)s"
)
LEFT_OUT = stored("card %(card)s left out of gray batch %(batch)s: %(why)s")
WAS_LOST = stored("lost before the soak started")
WAS_DEGRADED = stored("degraded before the soak started")
WAS_FAULT_CORDONED = stored("cordoned for a hardware fault before the soak started (%(reason)s)")
# What a rollback did with the nodes the batch's failure quarantined.
ROLLBACK_RELEASED = stored("%(reason)s (quarantine released on %(released)s)")
ROLLBACK_KEPT = stored("%(reason)s (still quarantined: %(kept)s: %(why)s)")
ROLLBACK_RELEASED_KEPT = stored(
    "%(reason)s (quarantine released on %(released)s; still quarantined: %(kept)s: %(why)s)"
)
STAYS_QUARANTINED = stored(
    "node %(node)s stays quarantined after the rollback of gray batch %(batch)s: %(why)s"
)
HELD_OTHER_REASON = stored("it is quarantined for another reason (%(reason)s)")
HELD_NODE_FAULT = stored("%(count)s separate card faults on the node, a node-level fault")
RELEASED_FROM_BATCH = stored("released from the page of gray batch %(batch)s: %(reason)s")


def _node_labels_record(node: Node, before: dict, actor, message: str) -> None:
    after = {"labels": node.labels, "taints": node.taints}
    DeviceEvent.objects.create(
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


# --------------------------------------------------------------------------------------------------
# soak criteria

CRITERIA_FIELDS = (
    "name",
    "min_days",
    "max_error_events",
    "max_temperature_c",
    "max_throughput_drop_pct",
    "max_lost_devices",
    "min_telemetry_coverage_pct",
)


@transaction.atomic
def soak_criteria_create(*, actor, **fields: Any) -> SoakCriteria:
    criteria = SoakCriteria()
    _set_fields(criteria, fields, CRITERIA_FIELDS)
    validate_and_save(criteria, what="soak criteria")
    change_record_create(
        actor=actor,
        action="soakcriteria.create",
        obj=criteria,
        after=snapshot(criteria, list(CRITERIA_FIELDS)),
    )
    return criteria


@transaction.atomic
def soak_criteria_update(*, criteria: SoakCriteria, actor, **changes: Any) -> SoakCriteria:
    criteria = SoakCriteria.objects.select_for_update().get(pk=criteria.pk)
    if changes and criteria.batches.filter(stage=Stage.SOAKING).exists():
        raise Conflict(
            _("criteria %(criteria)s are in use by a soaking batch; create new criteria instead")
            % {"criteria": criteria.name},
            details={
                "soaking_batches": list(
                    criteria.batches.filter(stage=Stage.SOAKING).values_list("name", flat=True)
                )
            },
        )
    _save_changes(
        criteria, changes, CRITERIA_FIELDS, what="soak criteria", action="soakcriteria.update", actor=actor
    )
    return criteria


@transaction.atomic
def soak_criteria_delete(*, criteria: SoakCriteria, actor) -> None:
    if criteria.batches.exists():
        raise Conflict(
            _("criteria %(criteria)s are used by %(count)d batch(es)")
            % {"criteria": criteria.name, "count": criteria.batches.count()}
        )
    change_record_create(
        actor=actor,
        action="soakcriteria.delete",
        obj=criteria,
        before=snapshot(criteria, list(CRITERIA_FIELDS)),
    )
    criteria.delete()


# --------------------------------------------------------------------------------------------------
# batches

BATCH_FIELDS = ("name", "slug", "kind", "target_version", "description", "criteria", "baseline_run")


def _check_nodes(nodes: list[Node]) -> None:
    if not nodes:
        raise ValidationFailed(
            _("a batch needs at least one node"), details={"nodes": [_("This list may not be empty.")]}
        )
    retired = [n.name for n in nodes if n.status == Node.Status.RETIRED]
    if retired:
        raise ValidationFailed(
            _("retired nodes cannot join a batch: %(nodes)s") % {"nodes": ", ".join(retired)},
            details={"nodes": retired},
        )


@transaction.atomic
def batch_create(*, actor, nodes: list[Node], reason: str = "", **fields: Any) -> GrayBatch:
    """A planned batch; ``reason`` (why it is created) is the audit record's message."""
    batch = GrayBatch(created_by=actor if not isinstance(actor, str) and actor is not None else None)
    _set_fields(batch, fields, BATCH_FIELDS)
    nodes = list(nodes or [])
    _check_nodes(nodes)
    validate_and_save(batch, what="gray batch", exclude=["created_by"])
    batch.nodes.set(nodes)
    change_record_create(
        actor=actor,
        action="graybatch.create",
        obj=batch,
        after={**snapshot(batch, list(BATCH_FIELDS)), "nodes": sorted(n.name for n in nodes)},
        message=(reason or "").strip(),
    )
    return batch


@transaction.atomic
def batch_update(*, batch: GrayBatch, actor, nodes: list[Node] | None = None, **changes: Any) -> GrayBatch:
    batch = _lock_batch(batch)
    if batch.stage != Stage.PLANNED and (nodes is not None or set(changes) - {"description"}):
        raise InvalidTransition(
            _(
                "batch %(batch)s is %(stage)s; only a planned batch changes its nodes, kind, version or criteria"
            )
            % {"batch": batch.name, "stage": batch.get_stage_display()},
            details={"stage": batch.stage},
        )
    before = {
        **snapshot(batch, list(BATCH_FIELDS)),
        "nodes": sorted(batch.nodes.values_list("name", flat=True)),
    }
    _set_fields(batch, changes, BATCH_FIELDS)
    if nodes is not None:
        _check_nodes(list(nodes))
    validate(batch, what="gray batch", exclude=["created_by"])
    if hasattr(batch, "wave") and batch.layer != batch.wave.layer:
        raise ValidationFailed(
            _("batch %(batch)s is the %(layer)s wave of %(plan)s; its kind must stay in that layer")
            % {"batch": batch.name, "layer": batch.wave.get_layer_display(), "plan": batch.wave.plan},
            details={"kind": [batch.kind]},
        )
    batch.save()
    if nodes is not None:
        batch.nodes.set(nodes)
    change_record_create(
        actor=actor,
        action="graybatch.update",
        obj=batch,
        before=before,
        after={
            **snapshot(batch, list(BATCH_FIELDS)),
            "nodes": sorted(batch.nodes.values_list("name", flat=True)),
        },
    )
    return batch


@transaction.atomic
def batch_delete(*, batch: GrayBatch, actor) -> None:
    batch = _lock_batch(batch)
    if batch.stage != Stage.PLANNED:
        raise InvalidTransition(
            _("batch %(batch)s is %(stage)s; only a planned batch may be deleted (roll it back instead)")
            % {"batch": batch.name, "stage": batch.get_stage_display()},
            details={"stage": batch.stage},
        )
    if batch.benchmark_runs.exists() or UpgradeWave.objects.filter(batch=batch).exists():
        raise Conflict(
            _("batch %(batch)s has benchmark runs or an upgrade wave; remove them first")
            % {"batch": batch.name}
        )
    change_record_create(
        actor=actor, action="graybatch.delete", obj=batch, before=snapshot(batch, list(BATCH_FIELDS))
    )
    batch.delete()


def _layer_check(batch: GrayBatch) -> None:
    wave = UpgradeWave.objects.filter(batch=batch).select_related("plan").first()
    if wave is None:
        return
    blockers = selectors.wave_blockers(wave)
    if not blockers:
        return
    first = blockers[0]
    raise Conflict(
        _(
            "cannot start the %(layer)s wave of %(plan)s: the %(first_layer)s wave (batch %(batch)s) has not "
            "passed, it is %(stage)s; upgrade collector / device plugin, then the scheduler, then node drivers"
        )
        % {
            "layer": Layer(wave.layer).label,
            "plan": wave.plan.name,
            "first_layer": Layer(first.layer).label,
            "batch": first.batch.name,
            "stage": first.batch.get_stage_display(),
        },
        code="layer_order",
        details={
            "blocking_waves": [
                {"wave": w.pk, "layer": w.layer, "batch": w.batch.name, "stage": w.batch.stage}
                for w in blockers
            ]
        },
    )


@transaction.atomic
def batch_soak_start(*, batch: GrayBatch, actor, now: datetime | None = None, reason: str = "") -> GrayBatch:
    """Put the batch's nodes in the gray pool (cards gray, node label and taint pushed). ``reason``
    (the operator's, from the batch page) is the audit record's message."""
    note = (reason or "").strip()
    now = now or timezone.now()
    batch = _lock_batch(batch)
    if batch.stage != Stage.PLANNED:
        _move(batch, to=Stage.SOAKING, expected=(Stage.PLANNED,), reason="", actor=actor)
    _layer_check(batch)
    # Lock the nodes (in pk order) so two batches sharing a node cannot both start.
    nodes = list(
        Node.objects.select_for_update(of=("self",))
        .filter(pk__in=batch.nodes.values("pk"))
        .select_related("cluster")
        .order_by("pk")
    )
    _check_nodes(nodes)
    problems = {}
    for node in nodes:
        if node.status == Node.Status.QUARANTINED:
            problems[node.name] = _("node %(node)s is quarantined") % {"node": node.name}
        busy = (
            GrayBatch.objects.filter(nodes=node, stage__in=[Stage.SOAKING, Stage.PASSED])
            .exclude(pk=batch.pk)
            .values_list("name", flat=True)
            .first()
        )
        if busy:
            problems[node.name] = _("node %(node)s is already in gray batch %(batch)s") % {
                "node": node.name,
                "batch": busy,
            }
        quarantined = [str(d) for d in _in_service(node) if d.pool_status == Device.PoolStatus.QUARANTINE]
        if quarantined:
            problems[node.name] = _("cards in quarantine on %(node)s: %(cards)s") % {
                "node": node.name,
                "cards": ", ".join(quarantined),
            }
    if problems:
        raise Conflict(
            _("cannot start the soak: %(problems)s") % {"problems": "; ".join(problems.values())},
            details={"nodes": problems},
        )
    # Judge only what happens during the soak: cards already unhealthy are left out at the start.
    excluded: list[tuple[Node, Device, str]] = []
    soaked: list[tuple[Node, list[Device]]] = []
    for node in nodes:
        cards = list(
            Device.objects.filter(node=node).exclude(health=Device.Health.RETIRED).order_by("vendor", "index")
        )
        keep = []
        for device in cards:
            why = _unhealthy_before_soak(device)
            if why:
                excluded.append((node, device, why))
            else:
                keep.append(device)
        soaked.append((node, keep))
    if not any(keep for _node, keep in soaked):
        raise Conflict(
            _("cannot start the soak: no healthy card on the batch's nodes (left out: %(excluded)s)")
            % {"excluded": "; ".join(f"{d}: {localize(why)}" for _n, d, why in excluded)},
            code="no_healthy_card",
            details={"excluded": [{"card": str(d), "reason": why} for _n, d, why in excluded]},
        )
    reason = GRAY_REASON % {
        "batch": batch.name,
        "kind": batch.get_kind_display(),
        "version": batch.target_version,
    }
    for node, keep in soaked:
        for device in keep:
            device_pool_status_set(
                device=device, pool_status=Device.PoolStatus.GRAY, reason=reason, actor=actor
            )
        node_gray_mark(node=node, batch=batch, actor=actor)
    label = actor_fields(actor)["actor_label"][:150]
    for node, device, why in excluded:
        DeviceEvent.objects.create(
            node=node,
            device=device,
            kind=DeviceEvent.Kind.UPDATED,
            severity=DeviceEvent.Severity.WARNING,
            message=(LEFT_OUT % {"card": str(device), "batch": batch.name, "why": why})[:500],
            actor_label=label,
        )
    GrayBatch.objects.filter(pk=batch.pk).update(
        excluded_devices=[
            {"device": d.pk, "card": str(d), "node": n.name, "health": d.health, "reason": why}
            for n, d, why in excluded
        ]
    )
    started = (
        SOAK_STARTED_LEFT_OUT
        % {"count": len(nodes), "left": len(excluded), "cards": ", ".join(str(d) for _n, d, _w in excluded)}
        if excluded
        else SOAK_STARTED % {"count": len(nodes)}
    )
    _move(
        batch,
        to=Stage.SOAKING,
        expected=(Stage.PLANNED,),
        reason=started,
        actor=actor,
        note=note,
        soak_started_at=now,
    )
    return batch


def _unhealthy_before_soak(device: Device) -> str:
    """Why a card is left out of a soak that starts now ("" when it takes part)."""
    if device.health == Device.Health.LOST:
        return WAS_LOST
    if device.health == Device.Health.DEGRADED:
        return WAS_DEGRADED
    if device.cordoned and (device.cordon_reason or "").startswith(FAULT_CORDON_PREFIX):
        return WAS_FAULT_CORDONED % {"reason": device.cordon_reason}
    return ""


@transaction.atomic
def batch_evaluate(*, batch: GrayBatch, actor, now: datetime | None = None, reason: str = "") -> SoakResult:
    """Compute the soak result now; a violated limit fails the batch, a complete soak passes it.

    The latest *pending* result is updated in place (a soak is evaluated every few minutes); a
    decisive result (pass / fail) is a row of its own. An evaluation someone asked for (``reason``
    given, from the batch page) is audited (``graybatch.evaluate``); the beat's are not, except for
    the stage change a decisive result makes.
    """
    reason = (reason or "").strip()
    now = now or timezone.now()
    batch = _lock_batch(batch)
    if batch.stage != Stage.SOAKING:
        raise InvalidTransition(
            _("batch %(batch)s is %(stage)s; only a soaking batch is evaluated")
            % {"batch": batch.name, "stage": batch.get_stage_display()},
            details={"stage": batch.stage},
        )
    measure = selectors.soak_measure(batch=batch, now=now)
    verdict, violations, missing = selectors.soak_judge(batch.criteria, measure)
    values = {
        "computed_at": now,
        "verdict": verdict,
        "window_start": measure.window_start,
        "window_end": measure.window_end,
        "soak_hours": measure.soak_hours,
        "error_events": measure.error_events,
        "lost_devices": measure.lost_devices,
        "max_temperature_c": measure.max_temperature_c,
        "telemetry_coverage_pct": measure.coverage_pct,
        "throughput_baseline": measure.throughput_baseline,
        "throughput_measured": measure.throughput_measured,
        "throughput_drop_pct": measure.throughput_drop_pct,
        "violations": violations,
        "missing": missing,
        "evidence": measure.evidence,
    }
    latest = batch.results.order_by("-computed_at", "-pk").first()
    if latest is not None and latest.verdict == SoakResult.Verdict.PENDING:
        for name, value in values.items():
            setattr(latest, name, value)
        latest.save()
        result = latest
    else:
        result = SoakResult.objects.create(batch=batch, **values)
    if reason:
        change_record_create(
            actor=actor,
            action="graybatch.evaluate",
            obj=batch,
            after={"result": result.pk, "verdict": verdict, "soak_hours": str(measure.soak_hours)},
            message=reason,
        )
    if verdict == SoakResult.Verdict.FAIL:
        _fail(
            batch,
            reason=SOAK_FAILED % {"violations": "; ".join(v["message"] for v in violations)},
            actor=actor,
            now=now,
        )
    elif verdict == SoakResult.Verdict.PASS:
        _move(
            batch,
            to=Stage.PASSED,
            expected=(Stage.SOAKING,),
            reason=SOAK_PASSED_AFTER % {"hours": measure.soak_hours},
            actor=actor,
            note=reason,
            soak_ended_at=now,
        )
    return result


def _fail(batch: GrayBatch, *, reason: str, actor, now: datetime) -> None:
    _move(
        batch,
        to=Stage.FAILED,
        expected=(Stage.SOAKING, Stage.PASSED),
        reason=reason,
        actor=actor,
        soak_ended_at=batch.soak_ended_at or now,
    )
    why = (BATCH_FAILED % {"batch": batch.name, "reason": reason})[:300]
    for node in _nodes(batch):
        for device in _in_service(node):
            device_pool_status_set(
                device=device, pool_status=Device.PoolStatus.QUARANTINE, reason=why, actor=actor
            )
        if node.status != Node.Status.RETIRED:
            node_status_set(node=node, status=Node.Status.QUARANTINED, reason=why, actor=actor)
        node_gray_clear(node=node, batch=batch, actor=actor)


@transaction.atomic
def batch_fail(*, batch: GrayBatch, actor, reason: str) -> GrayBatch:
    """An operator fails a soaking or passed batch (e.g. a problem the criteria do not see)."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(
            _("say why the batch fails"), details={"reason": [_("This field is required.")]}
        )
    batch = _lock_batch(batch)
    _fail(batch, reason=reason, actor=actor, now=timezone.now())
    return batch


@transaction.atomic
def batch_admit(*, batch: GrayBatch, actor, reason: str = "") -> GrayBatch:
    """Move a passed batch's cards to production and remove the gray label and taint."""
    batch = _lock_batch(batch)
    if batch.stage != Stage.PASSED:
        latest = batch.results.order_by("-computed_at", "-pk").first()
        why = _("batch %(batch)s is %(stage)s: its soak has not passed") % {
            "batch": batch.name,
            "stage": batch.get_stage_display(),
        }
        if latest is not None and latest.missing and batch.stage == Stage.SOAKING:
            why += _(" (still missing: %(missing)s)") % {
                "missing": "; ".join(localize(m) for m in latest.missing)
            }
        raise InvalidTransition(why, code="soak_not_passed", details={"stage": batch.stage})
    text = (reason or "").strip() or SOAK_PASSED
    for node in _nodes(batch):
        for device in _in_service(node):
            if device.pool_status == Device.PoolStatus.GRAY:
                device_pool_status_set(
                    device=device,
                    pool_status=Device.PoolStatus.PRODUCTION,
                    reason=ADMITTED % {"batch": batch.name},
                    actor=actor,
                )
        node_gray_clear(node=node, batch=batch, actor=actor)
    _move(
        batch,
        to=Stage.ADMITTED,
        expected=(Stage.PASSED,),
        reason=text,
        actor=actor,
        decided_at=timezone.now(),
    )
    return batch


def failure_reason_prefix(batch: GrayBatch) -> str:
    """How the reason of a node this batch's failure quarantined begins (``_fail`` writes it)."""
    return BATCH_FAILED % {"batch": batch.name, "reason": ""}


def quarantine_hold(*, batch: GrayBatch, node: Node) -> str:
    """Why ``node`` must stay quarantined once ``batch`` is rolled back ("" when the batch's failure
    is the only reason, or the node is not quarantined). A stored text."""
    if node.status != Node.Status.QUARANTINED:
        return ""
    if not (node.status_reason or "").startswith(failure_reason_prefix(batch)):
        return HELD_OTHER_REASON % {"reason": node.status_reason or "-"}
    incidents = node_fault_incidents(node)
    if incidents >= NODE_FAULT_INCIDENTS:
        return HELD_NODE_FAULT % {"count": incidents}
    return ""


def _release_node(*, batch: GrayBatch, node: Node, reason: str, actor) -> None:
    """Release a quarantined node of ``batch`` and return the cards this batch's failure quarantined
    (their latest quarantine event carries the failure's text) to production."""
    failure = (
        node.status_reason if (node.status_reason or "").startswith(failure_reason_prefix(batch)) else ""
    )
    node_status_set(node=node, status=Node.Status.READY, reason=reason[:300], actor=actor)
    if not failure:
        return
    for device in _in_service(node):
        if device.pool_status != Device.PoolStatus.QUARANTINE:
            continue
        latest = (
            DeviceEvent.objects.filter(device=device, kind=DeviceEvent.Kind.QUARANTINE)
            .order_by("-created_at", "-pk")
            .values_list("message", flat=True)
            .first()
        )
        if latest and failure[:200] in latest:
            device_pool_status_set(
                device=device, pool_status=Device.PoolStatus.PRODUCTION, reason=reason[:300], actor=actor
            )


@transaction.atomic
def batch_rollback(*, batch: GrayBatch, actor, reason: str) -> GrayBatch:
    """The change was reverted on the nodes: gray cards return to production, label and taint go.

    A node this batch's failure quarantined is released (with the cards the failure quarantined) when
    that failure is the only reason (``quarantine_hold``); otherwise it stays quarantined and the
    stage reason and an event on the node say why. ``batch.quarantine_outcome`` tells the caller:
    ``{"released": [node names], "kept": [{"node", "reason"}]}``."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(
            _("say why the batch is rolled back"), details={"reason": [_("This field is required.")]}
        )
    batch = _lock_batch(batch)
    expected = (Stage.SOAKING, Stage.PASSED, Stage.FAILED)
    if batch.stage not in expected:
        _move(batch, to=Stage.ROLLED_BACK, expected=expected, reason=reason, actor=actor)
    why = (BATCH_ROLLED_BACK % {"batch": batch.name, "reason": reason})[:300]
    released: list[str] = []
    kept: list[dict[str, str]] = []
    for node in _nodes(batch):
        for device in _in_service(node):
            if device.pool_status == Device.PoolStatus.GRAY:
                device_pool_status_set(
                    device=device, pool_status=Device.PoolStatus.PRODUCTION, reason=why, actor=actor
                )
        node = node_gray_clear(node=node, batch=batch, actor=actor)
        if node.status != Node.Status.QUARANTINED:
            continue
        hold = quarantine_hold(batch=batch, node=node)
        if not hold:
            _release_node(batch=batch, node=node, reason=why, actor=actor)
            released.append(node.name)
            continue
        kept.append({"node": node.name, "reason": hold})
        DeviceEvent.objects.create(
            node=node,
            kind=DeviceEvent.Kind.QUARANTINE,
            severity=DeviceEvent.Severity.WARNING,
            message=(STAYS_QUARANTINED % {"node": node.name, "batch": batch.name, "why": hold})[:500],
            actor_label=actor_fields(actor)["actor_label"][:150],
        )
    text = reason
    if released and kept:
        text = ROLLBACK_RELEASED_KEPT % {
            "reason": reason,
            "released": ", ".join(released),
            "kept": ", ".join(k["node"] for k in kept),
            "why": kept[0]["reason"],
        }
    elif released:
        text = ROLLBACK_RELEASED % {"reason": reason, "released": ", ".join(released)}
    elif kept:
        text = ROLLBACK_KEPT % {
            "reason": reason,
            "kept": ", ".join(k["node"] for k in kept),
            "why": kept[0]["reason"],
        }
    _move(
        batch,
        to=Stage.ROLLED_BACK,
        expected=expected,
        reason=text,
        actor=actor,
        soak_ended_at=batch.soak_ended_at or timezone.now(),
        decided_at=timezone.now(),
    )
    batch.quarantine_outcome = {"released": released, "kept": kept}
    return batch


@transaction.atomic
def batch_node_release(*, batch: GrayBatch, node: Node, actor, reason: str) -> Node:
    """Release a node of a rolled-back batch from quarantine (the batch page's action, staff): the
    node goes back to ready, and the cards this batch's failure quarantined back to production."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed(
            _("say why the node is released from quarantine"),
            details={"reason": [_("This field is required.")]},
        )
    batch = _lock_batch(batch)
    if not batch.nodes.filter(pk=node.pk).exists():
        raise ValidationFailed(
            _("node %(node)s is not in batch %(batch)s") % {"node": node.name, "batch": batch.name},
            details={"node": [node.name]},
        )
    if batch.stage != Stage.ROLLED_BACK:
        raise InvalidTransition(
            _(
                "batch %(batch)s is %(stage)s; roll it back (revert the change on the nodes) before releasing "
                "its nodes from quarantine"
            )
            % {"batch": batch.name, "stage": batch.get_stage_display()},
            details={"stage": batch.stage},
        )
    locked = Node.objects.select_for_update(of=("self",)).get(pk=node.pk)
    if locked.status != Node.Status.QUARANTINED:
        raise InvalidTransition(
            _("node %(node)s is %(status)s, not quarantined")
            % {"node": locked.name, "status": locked.get_status_display()},
            details={"status": locked.status},
        )
    text = (RELEASED_FROM_BATCH % {"batch": batch.name, "reason": reason})[:300]
    _release_node(batch=batch, node=locked, reason=text, actor=actor)
    locked.refresh_from_db()
    return locked


def batches_evaluate(*, actor="worker", now: datetime | None = None) -> dict[str, int]:
    """Evaluate every soaking batch (beat). One batch's error does not stop the others."""
    counts = {"evaluated": 0, "passed": 0, "failed": 0, "errors": 0}
    for pk in GrayBatch.objects.filter(stage=Stage.SOAKING).order_by("pk").values_list("pk", flat=True):
        try:
            result = batch_evaluate(batch=GrayBatch(pk=pk), actor=actor, now=now)
        except ApplicationError:
            counts["errors"] += 1
            continue
        counts["evaluated"] += 1
        if result.verdict == SoakResult.Verdict.PASS:
            counts["passed"] += 1
        elif result.verdict == SoakResult.Verdict.FAIL:
            counts["failed"] += 1
    return counts


# --------------------------------------------------------------------------------------------------
# benchmark runs

RUN_FIELDS = ("name", "node", "batch", "job", "throughput", "unit", "measured_at", "source", "profile")


@transaction.atomic
def benchmark_run_record(*, actor, **fields: Any) -> BenchmarkRun:
    """Record a measured benchmark run (posted by the benchmark harness)."""
    run = BenchmarkRun()
    _set_fields(run, fields, RUN_FIELDS)
    if run.measured_at is None:
        run.measured_at = timezone.now()
    if run.measured_at and run.measured_at > timezone.now() + timedelta(minutes=5):
        raise ValidationFailed(
            _("a benchmark run cannot be measured in the future"), details={"measured_at": ["future"]}
        )
    validate(run, what="benchmark run")
    if run.batch_id and not run.batch.nodes.filter(pk=run.node_id).exists():
        raise ValidationFailed(
            _("node %(node)s is not in batch %(batch)s") % {"node": run.node.name, "batch": run.batch.name},
            details={"node": [run.node.name]},
        )
    run.save()
    if run.profile_id:  # the same figure in the benchmark library (apps.benchlib)
        run.measurement = measurement_from_benchmark_run(run, profile=run.profile)
        run.save(update_fields=["measurement"])
    change_record_create(
        actor=actor, action="benchmarkrun.record", obj=run, after=snapshot(run, list(RUN_FIELDS))
    )
    return run


# --------------------------------------------------------------------------------------------------
# upgrade plans and waves


@transaction.atomic
def upgrade_plan_create(*, actor, name: str, description: str = "", reason: str = "") -> UpgradePlan:
    plan = UpgradePlan(name=name, description=description)
    validate_and_save(plan, what="upgrade plan")
    change_record_create(
        actor=actor,
        action="upgradeplan.create",
        obj=plan,
        after={"name": name},
        message=(reason or "").strip(),
    )
    return plan


@transaction.atomic
def upgrade_wave_create(*, actor, plan: UpgradePlan, batch: GrayBatch, reason: str = "") -> UpgradeWave:
    """Add a batch to a plan as the wave of its layer (derived from the batch's kind)."""
    layer = LAYER_OF_KIND.get(batch.kind)
    if layer is None:
        raise ValidationFailed(
            _(
                "a %(kind)s batch is not an upgrade layer (collector, device plugin, scheduler, driver or "
                "firmware)"
            )
            % {"kind": batch.get_kind_display()},
            details={"batch": [batch.kind]},
        )
    if UpgradeWave.objects.filter(batch=batch).exists():
        raise Conflict(
            _("batch %(batch)s already is a wave") % {"batch": batch.name}, details={"batch": [batch.name]}
        )
    wave = UpgradeWave(plan=plan, batch=batch, layer=layer)
    validate_and_save(wave, what="upgrade wave")
    change_record_create(
        actor=actor,
        action="upgradewave.create",
        obj=wave,
        after={"plan": plan.pk, "batch": batch.pk, "layer": layer},
        message=(reason or "").strip(),
    )
    return wave


def upgrade_wave_start(
    *, wave: UpgradeWave, actor, now: datetime | None = None, reason: str = ""
) -> UpgradeWave:
    """Start the wave's soak; refused (409, with the blocking waves) before earlier layers passed."""
    batch_soak_start(batch=wave.batch, actor=actor, now=now, reason=reason)
    return UpgradeWave.objects.select_related("plan", "batch").get(pk=wave.pk)


# --------------------------------------------------------------------------------------------------
# autoscaling

POLICY_FIELDS = (
    "job",
    "enabled",
    "up_threshold_pct",
    "up_window_s",
    "down_threshold_pct",
    "down_window_s",
    "cooldown_s",
    "buffer_pct",
    "min_replicas",
    "max_replicas",
    "step",
)


@transaction.atomic
def autoscale_policy_create(*, actor, **fields: Any) -> AutoscalePolicy:
    policy = AutoscalePolicy()
    _set_fields(policy, fields, POLICY_FIELDS)
    if policy.job_id and AutoscalePolicy.objects.filter(job_id=policy.job_id).exists():
        raise Conflict(
            _("job %(job)s already has an autoscaling policy; change that one") % {"job": policy.job}
        )
    validate_and_save(policy, what="autoscaling policy")
    change_record_create(
        actor=actor, action="autoscalepolicy.create", obj=policy, after=snapshot(policy, list(POLICY_FIELDS))
    )
    return policy


@transaction.atomic
def autoscale_policy_update(*, policy: AutoscalePolicy, actor, **changes: Any) -> AutoscalePolicy:
    policy = AutoscalePolicy.objects.select_for_update().select_related("job").get(pk=policy.pk)
    if "job" in changes and changes["job"].pk != policy.job_id:
        raise ValidationFailed(
            _("a policy stays with its service"), details={"job": [_("This field cannot be changed.")]}
        )
    changes.pop("job", None)
    _save_changes(
        policy,
        changes,
        POLICY_FIELDS,
        what="autoscaling policy",
        action="autoscalepolicy.update",
        actor=actor,
    )
    return policy


@transaction.atomic
def autoscale_policy_delete(*, policy: AutoscalePolicy, actor) -> None:
    change_record_create(
        actor=actor, action="autoscalepolicy.delete", obj=policy, before=snapshot(policy, list(POLICY_FIELDS))
    )
    policy.delete()


def autoscale_evaluate(
    *, policy: AutoscalePolicy, actor="autoscaler", now: datetime | None = None
) -> ScaleDecision | None:
    """Decide for one service from its measured utilization; a change scales it through
    ``inference_scale`` (cards allocated or released, Deployment pushed) and is recorded as a
    ``ScaleDecision``. Returns None when it holds (the reason is kept on the policy)."""
    from apps.scheduling.scaling import inference_scale

    now = now or timezone.now()
    with transaction.atomic():
        locked = (
            AutoscalePolicy.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("job")
            .filter(pk=policy.pk)
            .first()
        )
        if locked is None:  # another evaluation holds it
            return None
        job = locked.job

        def hold(reason: str) -> None:
            AutoscalePolicy.objects.filter(pk=locked.pk).update(
                last_evaluated_at=now, last_reason=reason[:300]
            )

        if not locked.enabled:
            hold(AUTOSCALE_DISABLED)
            return None
        if job.state not in (JobState.SCHEDULED, JobState.RUNNING):
            hold(SERVICE_IS % {"state": job.state})
            return None
        rules = locked.as_policy()
        horizon = max(rules.up_window_s, rules.down_window_s) + rules.max_staleness_s
        samples = selectors.job_utilization_samples(
            job=job, since=now - timedelta(seconds=horizon), until=now
        )
        last = locked.last_scaled_at.timestamp() if locked.last_scaled_at else None
        decision = autoscale.evaluate(
            rules, samples, now=now.timestamp(), current=job.replicas, last_scaled_at=last
        )
        if not decision.changes:
            hold(decision.reason)
            return None
        error = ""
        try:
            reached = inference_scale(
                job=job, replicas=decision.target, actor=actor, reason=AUTOSCALE % {"reason": decision.reason}
            )
        except ApplicationError as exc:
            reached, error = decision.current, exc.message
        if reached == decision.current and not error:
            error = AUTOSCALE_NO_ROOM % {"asked": decision.target}
        row = ScaleDecision.objects.create(
            policy=locked,
            job=job,
            created_at=now,
            action=ScaleDecision.Action.UP if decision.action == autoscale.UP else ScaleDecision.Action.DOWN,
            from_replicas=decision.current,
            to_replicas=decision.target,
            reached_replicas=reached,
            reason=decision.reason[:500],
            up_window_pct=decision.up_window_pct,
            down_window_pct=decision.down_window_pct,
            projected_pct=decision.projected_pct,
            error=error[:500],
            actor_label=actor_fields(actor)["actor_label"][:150],
        )
        fields: dict[str, Any] = {"last_evaluated_at": now, "last_reason": (error or decision.reason)[:300]}
        if reached != decision.current:
            fields["last_scaled_at"] = now
        AutoscalePolicy.objects.filter(pk=locked.pk).update(**fields)
        change_record_create(
            actor=actor,
            action="autoscale.decision",
            obj=job,
            before={"replicas": decision.current},
            after={"replicas": reached, "asked": decision.target},
            message=decision.reason + (f" ({error})" if error else ""),
        )
        return row


def autoscale_run(*, actor="autoscaler", now: datetime | None = None) -> dict[str, int]:
    """Evaluate every enabled policy (beat). One service's error does not stop the others."""
    counts = {"evaluated": 0, "scaled": 0, "errors": 0}
    for pk in (
        AutoscalePolicy.objects.filter(enabled=True, job__kind=Job.Kind.INFERENCE)
        .order_by("pk")
        .values_list("pk", flat=True)
    ):
        try:
            row = autoscale_evaluate(policy=AutoscalePolicy(pk=pk), actor=actor, now=now)
        except ApplicationError:
            counts["errors"] += 1
            continue
        counts["evaluated"] += 1
        if row is not None and row.reached_replicas != row.from_replicas:
            counts["scaled"] += 1
    return counts
