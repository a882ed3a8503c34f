"""Migration writes: plans, dual-track services, shift / roll back / promote, measurement ingestion.

Shifting moves traffic weight between the tracks and scales both inference Deployments with their
cards through ``apps.scheduling.scaling.inference_scale`` (allocations + outbox). The track that gains
traffic is scaled up first and the one that loses it is scaled down after, all in one transaction:
when the gaining track cannot get every replica it needs, nothing is written (409). Promotion
evaluates the gates of the service's current phase from measured data and refuses (409, with the
gates' measured values and sources) when one fails or has no data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from apps.accounts.models import Membership
from apps.accounts.selectors import user_role
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import (
    Conflict,
    InsufficientCapacity,
    InvalidTransition,
    PermissionDenied,
    ValidationFailed,
)
from apps.core.permissions import require_staff
from apps.core.stored_text import localize, stored
from apps.core.validation import validate, validate_and_save
from apps.jobs.models import ACTIVE_STATES, Allocation, Job
from apps.migration.capacity import shortfall_message, track_shortfall
from apps.migration.gates import service_gate_results
from apps.migration.models import (
    PHASE_ORDER,
    AccuracyEval,
    Gate,
    GateStatus,
    MigratedService,
    MigrationAction,
    MigrationPlan,
    Phase,
    PlanPhase,
    ServiceMetric,
    Track,
)


class GateFailed(Conflict):
    code = "gate_failed"


SERVICE_FIELDS = [
    "name",
    "phase",
    "source_weight",
    "target_weight",
    "capacity_replicas",
    "step_percent",
    "gate_status",
]
MAX_SAMPLES = 10_000
_STAFF_ONLY = "Only platform staff may change migration plans."
PLAN_FIELDS = ["name", "source_vendors", "target_vendors", "validate_max_target_weight", "fallback_cards"]


def require_writer(actor, project) -> None:
    """Staff, or a member / admin of the project (viewers read only). Labels (workers) may act."""
    if actor is None or isinstance(actor, str):
        return
    if user_role(actor, project) not in (Membership.Role.MEMBER, Membership.Role.ADMIN):
        raise PermissionDenied(
            _("Only members and admins of project %(project)r may steer its migration.")
            % {"project": project.slug}
        )


# ------------------------------------------------------------------ plans, phases, gates


@transaction.atomic
def plan_create(*, actor, phases: Iterable[dict] = (), gates: Iterable[dict] = (), **fields) -> MigrationPlan:
    require_staff(actor, message=_STAFF_ONLY)
    plan = MigrationPlan(**fields)
    if not isinstance(actor, str) and actor is not None:
        plan.created_by = actor
    validate_and_save(plan, what="migration plan")
    for item in phases:
        plan_phase_save(phase=PlanPhase(plan=plan, **item), actor=actor)
    for item in gates:
        gate_save(gate=Gate(plan=plan, **item), actor=actor)
    change_record_create(
        actor=actor, action="migration.plan.create", obj=plan, after=snapshot(plan, PLAN_FIELDS)
    )
    return plan


@transaction.atomic
def plan_update(*, plan: MigrationPlan, actor, **fields) -> MigrationPlan:
    require_staff(actor, message=_STAFF_ONLY)
    before = snapshot(plan, PLAN_FIELDS)
    for key, value in fields.items():
        setattr(plan, key, value)
    validate_and_save(plan, what="migration plan")
    change_record_create(
        actor=actor,
        action="migration.plan.update",
        obj=plan,
        before=before,
        after=snapshot(plan, PLAN_FIELDS),
    )
    return plan


@transaction.atomic
def plan_delete(*, plan: MigrationPlan, actor) -> None:
    require_staff(actor, message=_STAFF_ONLY)
    if plan.services.exists():
        raise Conflict(_("The plan still has services; remove them first."))
    change_record_create(
        actor=actor, action="migration.plan.delete", obj=plan, before=snapshot(plan, PLAN_FIELDS)
    )
    plan.delete()


@transaction.atomic
def plan_phase_save(*, phase: PlanPhase, actor) -> PlanPhase:
    require_staff(actor, message=_STAFF_ONLY)
    if PlanPhase.objects.filter(plan_id=phase.plan_id, phase=phase.phase).exclude(pk=phase.pk).exists():
        raise ValidationFailed(
            _("The plan already has a %(phase)s phase.") % {"phase": phase.phase},
            details={"phase": ["already in the plan"]},
        )
    validate(phase, what="plan phase")
    adding = phase.pk is None
    phase.save()
    change_record_create(
        actor=actor,
        action="migration.phase." + ("create" if adding else "update"),
        obj=phase,
        after=snapshot(phase, ["plan", "phase", "target_start", "target_end", "owner"]),
    )
    return phase


@transaction.atomic
def gate_save(*, gate: Gate, actor) -> Gate:
    require_staff(actor, message=_STAFF_ONLY)
    validate(gate, what="gate")
    adding = gate.pk is None
    gate.save()
    change_record_create(
        actor=actor,
        action="migration.gate." + ("create" if adding else "update"),
        obj=gate,
        after=snapshot(gate, ["plan", "phase", "kind", "threshold", "window_days", "metric"]),
    )
    return gate


@transaction.atomic
def object_delete(*, obj: PlanPhase | Gate, actor) -> None:
    require_staff(actor, message=_STAFF_ONLY)
    change_record_create(actor=actor, action=f"migration.{obj._meta.model_name}.delete", obj=obj)
    obj.delete()


# ------------------------------------------------------------------ services


def job_vendor(job: Job) -> str | None:
    """The vendor a job runs on: its live allocations' cards, else what its request names."""
    vendors = set(
        Allocation.objects.filter(job=job, released_at__isnull=True).values_list("device__vendor", flat=True)
    )
    if len(vendors) == 1:
        return vendors.pop()
    if job.device_model_id:
        return job.device_model.vendor
    if job.template_id:
        return job.template.device_model.vendor
    if job.vendor:
        return job.vendor
    if len(job.allowed_vendors or []) == 1:
        return job.allowed_vendors[0]
    return None


def split_replicas(capacity: int, target_weight: int) -> tuple[int, int]:
    """(source, target) replicas for a weight: each track keeps at least one replica (the dual track
    while validating, the CUDA fallback once reduced) and capacity is never short (rounded up)."""
    target = max(1, math.ceil(capacity * target_weight / 100))
    source = max(1, math.ceil(capacity * (100 - target_weight) / 100))
    return source, target


def _weights(
    *, target_weight: Any = None, source_weight: Any = None, default_target: int | None = None
) -> tuple[int, int]:
    """Normalize weights: both given → they must add up to 100; one given → the other is 100 − it."""
    details: dict[str, list[str]] = {}
    values = {}
    for name, value in (("source_weight", source_weight), ("target_weight", target_weight)):
        if value is None:
            continue
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            number = int(value)
        except (TypeError, ValueError):
            details[name] = ["a whole number of percent"]
            continue
        if not 0 <= number <= 100:
            details[name] = ["a whole number between 0 and 100"]
        values[name] = number
    if details:
        raise ValidationFailed(_("Traffic weights are whole percentages between 0 and 100."), details=details)
    if "source_weight" in values and "target_weight" in values:
        if values["source_weight"] + values["target_weight"] != 100:
            raise ValidationFailed(
                _("The traffic weights must add up to 100 (source %(source)d + target %(target)d = %(sum)d).")
                % {
                    "source": values["source_weight"],
                    "target": values["target_weight"],
                    "sum": values["source_weight"] + values["target_weight"],
                },
                details={"target_weight": ["source_weight + target_weight must be 100"]},
            )
        return values["source_weight"], values["target_weight"]
    if "target_weight" in values:
        return 100 - values["target_weight"], values["target_weight"]
    if "source_weight" in values:
        return values["source_weight"], 100 - values["source_weight"]
    if default_target is None:
        raise ValidationFailed(_("Give the traffic weights."), details={"target_weight": ["required"]})
    return 100 - default_target, default_target


def _record(
    service: MigratedService,
    *,
    kind: str,
    actor,
    before: dict,
    reason: str = "",
    replicas: dict | None = None,
    gate_results: list | None = None,
) -> MigrationAction:
    action = MigrationAction.objects.create(
        service=service,
        kind=kind,
        **actor_fields(actor),
        from_phase=before["phase"],
        to_phase=service.phase,
        from_target_weight=before["target_weight"],
        to_target_weight=service.target_weight,
        replicas=replicas or {},
        reason=reason[:500],
        gate_results=gate_results or [],
    )
    change_record_create(
        actor=actor,
        action=f"migration.service.{kind}",
        obj=service,
        before=before,
        after=snapshot(service, SERVICE_FIELDS),
        message=reason,
    )
    return action


@transaction.atomic
def service_create(
    *,
    actor,
    plan: MigrationPlan,
    name: str,
    source_job: Job,
    target_job: Job,
    kind: str = MigratedService.Kind.INFERENCE,
    critical: bool = False,
    capacity_replicas: int | None = None,
    source_weight: Any = None,
    target_weight: Any = None,
    step_percent: int = 10,
) -> MigratedService:
    """Start following a workload in dual track. Nothing is scaled: the next shift does that."""
    require_writer(actor, source_job.project)
    if source_job.project_id != target_job.project_id:
        raise ValidationFailed(
            _("Both tracks must be jobs of the same project."), details={"target_job": ["another project"]}
        )
    if source_job.pk == target_job.pk:
        raise ValidationFailed(
            _("The two tracks must be two different jobs."), details={"target_job": ["same job"]}
        )
    wanted = (
        (Job.Kind.INFERENCE,)
        if kind == MigratedService.Kind.INFERENCE
        else (Job.Kind.TRAINING, Job.Kind.FINETUNE)
    )
    for field, job in (("source_job", source_job), ("target_job", target_job)):
        if job.kind not in wanted:
            raise ValidationFailed(
                _("Job %(job)s is a %(kind)s job; a %(workload)s workload's tracks are %(wanted)s jobs.")
                % {"job": job.pk, "kind": job.kind, "workload": kind, "wanted": _(" or ").join(wanted)},
                details={field: [f"a {job.kind} job"]},
            )
    vendors = {}
    for field, job in (("source_job", source_job), ("target_job", target_job)):
        vendor = job_vendor(job)
        if vendor is None:
            raise ValidationFailed(
                _("Job %(job)s does not say which vendor it runs on; name a device model or one vendor.")
                % {"job": job.pk},
                details={field: ["vendor unknown"]},
            )
        vendors[field] = vendor
    if vendors["source_job"] == vendors["target_job"]:
        raise ValidationFailed(
            _(
                "Both tracks run on %(vendor)s: the target track must run on a domestic accelerator, not the "
                "source vendor."
            )
            % {"vendor": vendors["source_job"]},
            details={"target_job": [f"same vendor as the source ({vendors['source_job']})"]},
        )
    if vendors["source_job"] not in plan.source_vendors:
        raise ValidationFailed(
            _("The source track runs on %(vendor)s, not a source vendor of plan %(plan)r (%(vendors)s).")
            % {"vendor": vendors["source_job"], "plan": plan.name, "vendors": ", ".join(plan.source_vendors)},
            details={"source_job": [f"vendor {vendors['source_job']} is not a source of the plan"]},
        )
    if vendors["target_job"] not in plan.target_vendors:
        raise ValidationFailed(
            _("The target track runs on %(vendor)s, not a target vendor of plan %(plan)r (%(vendors)s).")
            % {"vendor": vendors["target_job"], "plan": plan.name, "vendors": ", ".join(plan.target_vendors)},
            details={"target_job": [f"vendor {vendors['target_job']} is not a target of the plan"]},
        )
    taken = MigratedService.objects.filter(
        source_job__in=[source_job, target_job]
    ) | MigratedService.objects.filter(target_job__in=[source_job, target_job])
    if taken.exists():
        raise ValidationFailed(
            _("One of these jobs is already a track of another migrated service."),
            details={"source_job": ["already a track"]},
        )
    src_w, tgt_w = _weights(target_weight=target_weight, source_weight=source_weight, default_target=0)
    service = MigratedService(
        plan=plan,
        project=source_job.project,
        name=name,
        kind=kind,
        critical=critical,
        source_job=source_job,
        target_job=target_job,
        source_vendor=vendors["source_job"],
        target_vendor=vendors["target_job"],
        capacity_replicas=capacity_replicas or max(1, source_job.replicas),
        source_weight=src_w,
        target_weight=tgt_w,
        step_percent=step_percent,
        phase=Phase.VALIDATE,
        phase_changed_at=timezone.now(),
    )
    validate_and_save(service, what="migrated service")
    before = {"phase": "", "target_weight": None}
    _record(
        service,
        kind=MigrationAction.Kind.CREATE,
        actor=actor,
        before=before,
        replicas={"source": [source_job.replicas] * 2, "target": [target_job.replicas] * 2},
    )
    return service


def _require_scheduled(service: MigratedService) -> None:
    states = dict(
        Job.objects.filter(pk__in=[service.source_job_id, service.target_job_id]).values_list("pk", "state")
    )
    idle = [
        (_("source job %(job)s is %(state)s") if track == "source" else _("target job %(job)s is %(state)s"))
        % {"job": pk, "state": localize(states.get(pk))}
        for track, pk in (("source", service.source_job_id), ("target", service.target_job_id))
        if states.get(pk) not in ACTIVE_STATES
    ]
    if idle:
        raise InvalidTransition(
            _("Replicas shift only between scheduled or running tracks: %(tracks)s.")
            % {"tracks": "; ".join(idle)},
            details={"tracks": idle},
        )


# The scaling reason on the tracks' job events, in the reader's language (apps.core.stored_text).
WEIGHT_CHANGE = stored("migration %(service)s: target weight %(old)s → %(new)s %%")
WEIGHT_CHANGE_BECAUSE = stored("migration %(service)s: target weight %(old)s → %(new)s %% (%(reason)s)")


def _scale_tracks(service: MigratedService, target_weight: int, actor, reason: str) -> dict:
    """Scale both Deployments for ``target_weight``: the gaining track first. Inside a transaction."""
    from apps.scheduling.scaling import inference_scale

    source_job = Job.objects.get(pk=service.source_job_id)
    target_job = Job.objects.get(pk=service.target_job_id)
    before = {"source": source_job.replicas, "target": target_job.replicas}
    if service.kind != MigratedService.Kind.INFERENCE:
        # Training tracks are runs, not Deployments: the weight is the share of new runs sent to the
        # target vendor; nothing is scaled.
        return {track: [count, count] for track, count in before.items()}
    _require_scheduled(service)
    src_n, tgt_n = split_replicas(service.capacity_replicas, target_weight)
    order = (
        [(Track.TARGET, target_job, tgt_n), (Track.SOURCE, source_job, src_n)]
        if target_weight >= service.target_weight
        else [(Track.SOURCE, source_job, src_n), (Track.TARGET, target_job, tgt_n)]
    )
    after = dict(before)
    why = (WEIGHT_CHANGE_BECAUSE if reason else WEIGHT_CHANGE) % {
        "service": service.name,
        "old": service.target_weight,
        "new": target_weight,
        "reason": reason,
    }
    for track, job, wanted in order:
        reached = inference_scale(job=job, replicas=wanted, actor=actor, reason=why)
        if reached < wanted:
            # Name the real shortfall (model, pool, shape, needed vs free, what holds the rest).
            short = track_shortfall(job=job, wanted=wanted, reached=reached)
            raise InsufficientCapacity(
                shortfall_message(track=str(track), job=job, wanted=wanted, reached=reached, short=short),
                details={str(track): {"wanted": wanted, "reached": reached, **short.as_dict()}},
            )
        after[track] = reached
    return {track: [before[track], after[track]] for track in before}


def _lock(service: MigratedService) -> MigratedService:
    return MigratedService.objects.select_for_update().select_related("plan", "project").get(pk=service.pk)


@transaction.atomic
def service_shift(
    *,
    service: MigratedService,
    actor,
    step: Any = None,
    target_weight: Any = None,
    source_weight: Any = None,
    reason: str = "",
) -> MigrationAction:
    """Move traffic towards the target track: one step (the service's, or ``step``), or to explicit
    weights (which must add up to 100). Both Deployments are scaled through the outbox."""
    require_writer(actor, service.project)
    service = _lock(service)
    if target_weight is None and source_weight is None:
        try:
            step_value = int(step) if step is not None else service.step_percent
        except (TypeError, ValueError):
            raise ValidationFailed(
                _("step is a whole number of percent."), details={"step": ["not a number"]}
            ) from None
        if not 1 <= step_value <= 100:
            raise ValidationFailed(
                _("step must be between 1 and %(max)d %%.") % {"max": 100}, details={"step": [str(step)]}
            )
        new_target = min(100, service.target_weight + step_value)
    else:
        _src, new_target = _weights(target_weight=target_weight, source_weight=source_weight)
    if new_target == service.target_weight:
        raise Conflict(
            _("The target track already carries %(weight)d %% of the traffic.") % {"weight": new_target}
        )
    if new_target < service.target_weight:
        raise ValidationFailed(
            _(
                "A shift moves traffic towards the target track (%(now)d %% now); use rollback to go back to "
                "%(asked)d %%."
            )
            % {"now": service.target_weight, "asked": new_target},
            details={"target_weight": ["lower than now: roll back instead"]},
        )
    if service.phase == Phase.VALIDATE and new_target > service.plan.validate_max_target_weight:
        raise Conflict(
            _(
                "While validating, the target track carries at most %(max)d %% of the traffic (asked %(asked)d "
                "%%); promote the service past its validation gates first."
            )
            % {"max": service.plan.validate_max_target_weight, "asked": new_target},
            code="phase_limit",
        )
    before = {**snapshot(service, SERVICE_FIELDS)}
    replicas = _scale_tracks(service, new_target, actor, reason)
    service.target_weight = new_target
    service.source_weight = 100 - new_target
    validate_and_save(
        service, what="migrated service", update_fields=["target_weight", "source_weight", "updated_at"]
    )
    return _record(
        service, kind=MigrationAction.Kind.SHIFT, actor=actor, before=before, reason=reason, replicas=replicas
    )


@transaction.atomic
def service_rollback(
    *, service: MigratedService, actor, target_weight: Any = 0, reason: str = ""
) -> MigrationAction:
    """Send traffic back to the source track (all of it by default). From the reduce phase the service
    returns to the phase before it: the source track is no longer a mere fallback."""
    require_writer(actor, service.project)
    service = _lock(service)
    _src, new_target = _weights(target_weight=0 if target_weight is None else target_weight)
    if new_target >= service.target_weight:
        raise Conflict(
            _(
                "Nothing to roll back: the target track carries %(now)d %% and the rollback asks for %(asked)d %%."
            )
            % {"now": service.target_weight, "asked": new_target}
        )
    before = snapshot(service, SERVICE_FIELDS)
    replicas = _scale_tracks(service, new_target, actor, reason)
    service.target_weight = new_target
    service.source_weight = 100 - new_target
    if service.phase == Phase.REDUCE:
        service.phase = service.phases[-2]
        service.phase_changed_at = timezone.now()
    validate_and_save(service, what="migrated service")
    return _record(
        service,
        kind=MigrationAction.Kind.ROLLBACK,
        actor=actor,
        before=before,
        reason=reason,
        replicas=replicas,
    )


def service_gates_evaluate(
    *, service: MigratedService, actor=None, now: datetime | None = None
) -> list[dict]:
    """Evaluate the gates of the service's phase from measured data and store the outcome."""
    service.refresh_from_db(fields=["phase", "kind", "plan"])
    results = [r.as_dict() for r in service_gate_results(service=service, now=now)]
    status = GateStatus.PASSED if all(r["status"] == "pass" for r in results) else GateStatus.FAILED
    MigratedService.objects.filter(pk=service.pk).update(
        gate_status=status, gate_results=results, gate_checked_at=timezone.now()
    )
    service.gate_status, service.gate_results = status, results
    return results


def _failure_reason(service: MigratedService, failed: list[dict]) -> str:
    parts = []
    for r in failed:
        measured = (
            _("measured %(value)s %(unit)s") % {"value": r["measured"], "unit": localize(r["unit"])}
            if r["measured"] is not None
            else _("nothing measured")
        )
        parts.append(
            _("gate “%(gate)s” %(status)s: %(measured)s, threshold %(threshold)s; %(detail)s")
            % {
                "gate": localize(r["description"]),
                "status": localize(r["status"]),
                "measured": measured,
                "threshold": r["threshold"],
                "detail": localize(r["detail"]),
            }
        )
    return _("Cannot promote %(service)s past %(phase)s: %(gates)s") % {
        "service": service.name,
        "phase": localize(service.phase),
        "gates": " | ".join(parts),
    }


def service_promote(
    *, service: MigratedService, actor, reason: str = "", now: datetime | None = None
) -> MigrationAction:
    """Move the service to its next phase when every gate of its current phase passes (409 otherwise,
    with each failing gate's measured value and source)."""
    require_writer(actor, service.project)
    service.refresh_from_db()
    target_phase = service.next_phase
    if target_phase is None:
        raise Conflict(
            _("%(service)s is already in its last phase (%(phase)s).")
            % {"service": service.name, "phase": localize(service.phase)}
        )
    # The evaluation is stored even when the promotion is refused: the page shows why.
    results = service_gates_evaluate(service=service, actor=actor, now=now)
    failed = [r for r in results if r["status"] != "pass"]
    if failed:
        raise GateFailed(_failure_reason(service, failed), details={"gates": failed})
    with transaction.atomic():
        service = _lock(service)
        if service.next_phase != target_phase:
            raise Conflict(
                _("%(service)s moved to %(phase)s meanwhile; evaluate again.")
                % {"service": service.name, "phase": localize(service.phase)}
            )
        if target_phase == Phase.REDUCE and service.target_weight < 100:
            raise Conflict(
                _(
                    "Shift all traffic to the target track before reducing the source track (the target carries "
                    "%(weight)d %%)."
                )
                % {"weight": service.target_weight},
                code="traffic_not_shifted",
            )
        before = snapshot(service, SERVICE_FIELDS)
        service.phase = target_phase
        service.phase_changed_at = timezone.now()
        service.gate_status = GateStatus.PENDING
        validate_and_save(service, what="migrated service")
        return _record(
            service,
            kind=MigrationAction.Kind.PROMOTE,
            actor=actor,
            before=before,
            reason=reason,
            gate_results=results,
        )


@transaction.atomic
def service_delete(*, service: MigratedService, actor) -> None:
    require_writer(actor, service.project)
    change_record_create(
        actor=actor, action="migration.service.delete", obj=service, before=snapshot(service, SERVICE_FIELDS)
    )
    service.delete()


# ------------------------------------------------------------------ measurements


def _decimal(value, name: str, errors: dict, index: int) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        errors.setdefault(str(index), {})[name] = "not a number"
        return None
    if not number.is_finite() or number < 0:
        errors.setdefault(str(index), {})[name] = "a finite number ≥ 0"
        return None
    return number


def _when(value, name: str, errors: dict, index: int) -> datetime | None:
    moment = value if isinstance(value, datetime) else parse_datetime(str(value or ""))
    if moment is None or timezone.is_naive(moment):
        errors.setdefault(str(index), {})[name] = "an ISO 8601 time with its offset"
        return None
    return moment


@transaction.atomic
def service_metrics_ingest(*, service: MigratedService, samples: list[dict], actor) -> dict:
    """Store request-metric windows of the service's tracks (idempotent per window and source).
    Every sample is checked first; one bad sample refuses the whole batch (400, by index)."""
    require_writer(actor, service.project)
    if not isinstance(samples, list) or not samples:
        raise ValidationFailed(_("Give a non-empty list of samples."), details={"samples": ["required"]})
    if len(samples) > MAX_SAMPLES:
        raise ValidationFailed(
            _("At most %(max)d samples per batch (%(given)d given).")
            % {"max": MAX_SAMPLES, "given": len(samples)},
            details={"samples": ["too many"]},
        )
    errors: dict[str, dict] = {}
    rows = []
    for i, raw in enumerate(samples):
        if not isinstance(raw, dict):
            errors[str(i)] = {"sample": "an object"}
            continue
        track = raw.get("track")
        if track not in Track.values:
            errors.setdefault(str(i), {})["track"] = f"one of {', '.join(Track.values)}"
        start = _when(raw.get("window_start"), "window_start", errors, i)
        seconds = _decimal(raw.get("window_seconds", 300), "window_seconds", errors, i)
        requests = _decimal(raw.get("requests"), "requests", errors, i)
        errs = _decimal(raw.get("errors", 0), "errors", errors, i)
        p99 = _decimal(raw.get("p99_latency_ms"), "p99_latency_ms", errors, i)
        source = str(raw.get("source") or "").strip()
        if not source:
            errors.setdefault(str(i), {})["source"] = (
                "where the figures came from (e.g. the Prometheus query)"
            )
        if requests is None and "requests" not in errors.get(str(i), {}):
            errors.setdefault(str(i), {})["requests"] = "required"
        if seconds is not None and not 1 <= seconds <= 86400:
            errors.setdefault(str(i), {})["window_seconds"] = "between 1 and 86400"
        if requests is not None and errs is not None and errs > requests:
            errors.setdefault(str(i), {})["errors"] = "more errors than requests"
        for name, value in (("requests", requests), ("errors", errs), ("window_seconds", seconds)):
            if value is not None and value != value.to_integral_value():
                errors.setdefault(str(i), {})[name] = "a whole number"
        if str(i) not in errors:
            rows.append((track, start, int(seconds), int(requests), int(errs or 0), p99, source[:300]))
    if errors:
        first = next(iter(errors.items()))
        raise ValidationFailed(
            _("Sample %(sample)s is invalid: %(problems)s")
            % {"sample": first[0], "problems": "; ".join(f"{k}: {v}" for k, v in first[1].items())},
            details=errors,
        )
    created = updated = 0
    for track, start, seconds, requests, errs, p99, source in rows:
        _obj, made = ServiceMetric.objects.update_or_create(
            service=service,
            track=track,
            window_start=start,
            source=source,
            defaults={"window_seconds": seconds, "requests": requests, "errors": errs, "p99_latency_ms": p99},
        )
        created += made
        updated += not made
    return {"created": created, "updated": updated}


@transaction.atomic
def accuracy_eval_record(
    *,
    service: MigratedService,
    actor,
    track: str,
    metric: str,
    value: Any,
    source: str,
    measured_at: Any,
    dataset: str = "",
) -> AccuracyEval:
    require_writer(actor, service.project)
    errors: dict = {}
    number = _decimal(value, "value", errors, 0)
    moment = _when(measured_at, "measured_at", errors, 0)
    details = dict(errors.get("0", {}))
    if track not in Track.values:
        details["track"] = f"one of {', '.join(Track.values)}"
    if number is None and "value" not in details:
        details["value"] = "required"
    if not str(source or "").strip():
        details["source"] = "where the figure came from (evaluation job, report URL)"
    if not str(metric or "").strip():
        details["metric"] = "required"
    if details:
        raise ValidationFailed(
            _("Invalid accuracy evaluation: %(problems)s")
            % {"problems": "; ".join(f"{k}: {v}" for k, v in details.items())},
            details=details,
        )
    row = AccuracyEval(
        service=service,
        track=track,
        metric=metric.strip(),
        value=number,
        dataset=dataset,
        source=source.strip(),
        measured_at=moment,
    )
    validate_and_save(row, what="accuracy evaluation")
    change_record_create(
        actor=actor,
        action="migration.accuracy.record",
        obj=service,
        after={"track": track, "metric": row.metric, "value": str(number), "source": row.source},
    )
    return row


__all__ = [
    "PHASE_ORDER",
    "GateFailed",
    "accuracy_eval_record",
    "job_vendor",
    "plan_create",
    "service_create",
    "service_gates_evaluate",
    "service_metrics_ingest",
    "service_promote",
    "service_rollback",
    "service_shift",
    "split_replicas",
]
