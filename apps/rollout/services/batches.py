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

from datetime import datetime
from typing import Any

from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import ApplicationError, Conflict, InvalidTransition, ValidationFailed
from apps.core.stored_text import localize
from apps.core.validation import validate, validate_and_save
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.ledger import device_pool_status_set
from apps.inventory.services.ledger.events import device_event_create
from apps.notify.models import Event
from apps.notify.services import notify
from apps.rollout import selectors
from apps.rollout.models import (
    GrayBatch,
    Layer,
    SoakResult,
    UpgradeWave,
)
from apps.rollout.services.stages import (
    Stage,
    _in_service,
    _lock_batch,
    _move,
    _nodes,
    _set_fields,
    node_gray_clear,
    node_gray_mark,
)
from apps.rollout.services.texts import (
    ADMITTED,
    BATCH_FAILED,
    BATCH_ROLLED_BACK,
    GRAY_REASON,
    HELD_NODE_FAULT,
    HELD_OTHER_REASON,
    LEFT_OUT,
    RELEASED_FROM_BATCH,
    ROLLBACK_KEPT,
    ROLLBACK_RELEASED,
    ROLLBACK_RELEASED_KEPT,
    SOAK_FAILED,
    SOAK_PASSED,
    SOAK_PASSED_AFTER,
    SOAK_STARTED,
    SOAK_STARTED_LEFT_OUT,
    STAYS_QUARANTINED,
    WAS_DEGRADED,
    WAS_FAULT_CORDONED,
    WAS_LOST,
)
from apps.scheduling.faults import (
    FAULT_CORDON_PREFIX,
    NODE_FAULT_INCIDENTS,
    node_fault_incidents,
    node_status_change,
)

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
        device_event_create(
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
        _soak_failed_notify(batch)
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


def _soak_failed_notify(batch: GrayBatch) -> None:
    """Tell the platform staff a batch failed its soak (queued in the evaluating transaction)."""
    notify(
        Event.GRAY_BATCH_FAILED,
        key=f"batch:{batch.pk}:failed",
        message=gettext_noop("Gray batch %(batch)s failed its soak (%(version)s)."),
        params={"batch": batch.name, "version": batch.target_version},
        staff=True,
        link=reverse("rollout:batch-detail", kwargs={"pk": batch.pk}),
    )


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
            node_status_change(node=node, status=Node.Status.QUARANTINED, reason=why, actor=actor)
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
    node_status_change(node=node, status=Node.Status.READY, reason=reason[:300], actor=actor)
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
        device_event_create(
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
