"""Writes of the benchmark library: measurements from every source, and coefficient proposals.

Sources, one model (``Measurement``):

* **job reports** — any job posts its measured throughput (and p99 latency) for its profile; the card,
  template and share come from the job's allocations, never from the report, and the measurement is
  weighted by how much of the card the job had;
* **benchmark runs** — jobs of kind ``benchmark`` report the same way; on the simulated backend
  ``synthetic_result`` makes a plausible figure from the device catalog's peaks (marked synthetic);
* **gray-batch benchmark runs** (``rollout.BenchmarkRun``) that name a profile feed the same table
  through ``measurement_from_benchmark_run``.

Bad input is a precise 400 (403/409 where it is about who or when) with nothing written.

Poisoning (issue 27 §3): every figure fits its column and a job's figure its card's catalog peak
(``apps.benchlib.plausibility``); ``runs`` is counted by the platform (one per report), never declared; a
project's own report (``source=job``) counts fleet-wide — rankings, coefficient proposals — only once
platform staff verified it (``measurement_verify``); benchmark figures come from the platform or staff.
"""

from __future__ import annotations

import hashlib
import math
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.selectors import is_platform_staff
from apps.benchlib.models import CoefficientProposal, Measurement, trusted_q
from apps.benchlib.plausibility import check_plausible, column_limits, column_value
from apps.catalog.models import ComputeCoefficient, DeviceModel, WorkloadProfile
from apps.catalog.selectors import coefficients_on
from apps.core.audit import actor_fields, change_record_create, snapshot
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.core.stored_text import stored
from apps.core.validation import validate
from apps.jobs.models import Allocation, Job, JobState

MAX_LATENCY_MS = Decimal("1e7")
MAX_SPREAD_PCT = Decimal(1000)
REPORT_FIELDS = {"profile", "throughput", "p99_latency_ms", "spread_pct", "measured_at", "runtime"}
# A proposal is made when measurements and the coefficient disagree by more than this (relative).
PROPOSAL_THRESHOLD = Decimal("0.15")
REFERENCE_MODEL_SLUG = "a100-80gb-sxm4"  # one CU = this card for one hour (apps.catalog.models)
# The reason of a coefficient taken from a proposal (a stored text: apps.core.stored_text).
# The source of a benchmark run whose figure is simulated (the demo's, a test harness's): marked synthetic.
SIMULATED_SOURCE_PREFIX = "simulated:"
COEFFICIENT_REASON = stored("benchmark library proposal %(proposal)s: measured ratios %(evidence)s")


def _number(data: dict, name: str, *, required: bool = False, upper: Decimal | None = None):
    """The field ``name`` of a report as a Decimal its column holds (rounded to its places), or None."""
    value = data.get(name)
    if value in (None, ""):
        if required:
            raise ValidationFailed(_("%(name)s is required.") % {"name": name}, details={name: ["required"]})
        return None
    if isinstance(value, bool):
        raise ValidationFailed(
            _("%(name)s must be a number.") % {"name": name}, details={name: ["not a number"]}
        )
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValidationFailed(
            _("%(name)s must be a number.") % {"name": name}, details={name: ["not a number"]}
        )
    return column_value(number, model=Measurement, field=name, name=name, upper=upper)


def _profile(key) -> WorkloadProfile:
    profile = WorkloadProfile.objects.filter(key=str(key or "")).first()
    if profile is None:
        raise ValidationFailed(
            _("Unknown workload profile %(key)r.") % {"key": key}, details={"profile": ["unknown"]}
        )
    return profile


def _report_values(data: dict) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValidationFailed(_("A report is a JSON object."), details={"body": ["not an object"]})
    if "runs" in data:
        raise ValidationFailed(
            _("runs is counted by the platform (one per report); leave it out and post each run's report."),
            details={"runs": ["counted by the platform"]},
        )
    unknown = set(data) - REPORT_FIELDS
    if unknown:
        raise ValidationFailed(
            _("Unknown fields: %(list)s.") % {"list": ", ".join(sorted(unknown))},
            details={f: ["unknown"] for f in sorted(unknown)},
        )
    values: dict[str, Any] = {
        "profile": _profile(data.get("profile")),
        "throughput": _number(data, "throughput", required=True),
        "p99_latency_ms": _number(data, "p99_latency_ms", upper=MAX_LATENCY_MS),
        "runs": 1,
        "spread_pct": None,
        "runtime": str(data.get("runtime") or "")[:60],
    }
    spread = data.get("spread_pct")
    if spread not in (None, ""):
        if spread in (0, "0"):
            values["spread_pct"] = Decimal(0)
        else:
            values["spread_pct"] = _number(data, "spread_pct", upper=MAX_SPREAD_PCT)
    measured = data.get("measured_at")
    if measured in (None, ""):
        values["measured_at"] = timezone.now()
    else:
        from django.utils.dateparse import parse_datetime

        moment = parse_datetime(str(measured)) if isinstance(measured, str) else None
        if moment is None or timezone.is_naive(moment):
            raise ValidationFailed(
                _("measured_at must be an ISO 8601 time with a UTC offset."),
                details={"measured_at": ["invalid"]},
            )
        if moment > timezone.now() + timedelta(minutes=5):
            raise ValidationFailed(
                _("A measurement cannot be in the future."), details={"measured_at": ["future"]}
            )
        values["measured_at"] = moment
    return values


def _job_shape(job: Job) -> tuple[DeviceModel, Any, Decimal, int, Any, Any, str]:
    """(device model, template, share %, cards of one replica, device, node, driver) from the job's
    allocations of its current attempt (active, or the last ones released)."""
    rows = list(
        Allocation.objects.filter(job=job, attempt=job.attempt)
        .select_related("device__device_model", "device__node")
        .order_by("replica", "device_id")
    )
    if not rows:
        raise Conflict(
            _("Job %(job)s has no cards yet: a job reports its throughput after it has run.")
            % {"job": job.pk}
        )
    first = rows[0]
    models = {r.device.device_model_id for r in rows}
    if len(models) != 1 or first.device.device_model is None:
        raise Conflict(
            _("Job %(job)s ran on several device models; report per model through a benchmark run.")
            % {"job": job.pk}
        )
    replica_rows = [r for r in rows if r.replica == first.replica]
    share = (
        Decimal(100) if first.whole_card else (Decimal(first.compute_milli) / 10).quantize(Decimal("0.01"))
    )
    return (
        first.device.device_model,
        job.template if job.template_id else None,
        share,
        len(replica_rows),
        first.device,
        first.device.node,
        first.device.node.driver_version or "",
    )


@transaction.atomic
def job_report(*, job: Job, data: dict, actor) -> Measurement:
    """A job posts its measured throughput for its profile: one measurement per attempt."""
    values = _report_values(data)
    if job.workload_profile_id and values["profile"].pk != job.workload_profile_id:
        raise ValidationFailed(
            _("Job %(job)s measures %(profile)s, not %(other)s.")
            % {"job": job.pk, "profile": job.workload_profile.key, "other": values["profile"].key},
            details={"profile": ["does not match the job"]},
        )
    if job.state not in (JobState.RUNNING, JobState.SUCCEEDED):
        raise Conflict(
            _("Job %(job)s is %(state)s: only a running or succeeded job reports throughput.")
            % {"job": job.pk, "state": job.get_state_display()}
        )
    model, template, share, cards, device, node, driver = _job_shape(job)
    check_plausible(
        values["throughput"],
        profile=values["profile"],
        model=model,
        share=share,
        cards=cards * job.replicas,
        trusted_best=_trusted_best_per_card(values["profile"], model),
    )
    # Only the platform and its staff make benchmark figures; a project's report is a job report, also
    # for a benchmark-kind job its members started (it counts fleet-wide once staff verified it).
    staff = is_platform_staff(actor)
    source = (
        Measurement.Source.BENCHMARK if job.kind == Job.Kind.BENCHMARK and staff else Measurement.Source.JOB
    )
    measurement = Measurement(
        device_model=model,
        template=template,
        compute_share=share,
        cards=cards * job.replicas,
        source=source,
        source_label=f"job {job.pk} attempt {job.attempt}",
        device=device,
        node=node,
        job=job,
        driver_version=driver,
        **values,
    )
    validate(measurement, what=_("The report"), validate_unique=False, validate_constraints=False)
    try:
        with transaction.atomic():
            measurement.save()
    except IntegrityError:
        raise Conflict(
            _("Job %(job)s already reported its throughput for attempt %(attempt)s.")
            % {"job": job.pk, "attempt": job.attempt}
        )
    change_record_create(
        actor=actor,
        action="measurement.report",
        obj=measurement,
        after=snapshot(measurement, ["throughput", "compute_share", "cards", "source"])
        | {"profile": measurement.profile.key, "job": job.pk},
    )
    return measurement


def _trusted_best_per_card(profile: WorkloadProfile, model: DeviceModel) -> Decimal | None:
    """The best whole-card-equivalent figure a trusted measurement found (the ceiling's fallback)."""
    rows = Measurement.objects.filter(trusted_q(), profile=profile, device_model=model)
    return max((m.per_card for m in rows), default=None)


@transaction.atomic
def measurement_verify(*, measurement: Measurement, actor) -> Measurement:
    """Platform staff vouch for a job report: from now on it ranks fleet-wide and may back proposals."""
    if not is_platform_staff(actor):
        raise PermissionDenied(_("Only platform staff verify measurements."))
    measurement = Measurement.objects.select_for_update().get(pk=measurement.pk)
    if measurement.trusted:
        raise Conflict(
            _("Measurement %(id)s already counts fleet-wide (%(why)s).")
            % {
                "id": measurement.pk,
                "why": _("verified by %(who)s") % {"who": measurement.verified_by}
                if measurement.verified_at
                else measurement.get_source_display(),
            }
        )
    measurement.verified_at = timezone.now()
    measurement.verified_by = actor_fields(actor)["actor_label"]
    measurement.save(update_fields=["verified_at", "verified_by"])
    change_record_create(
        actor=actor,
        action="measurement.verify",
        obj=measurement,
        before={"verified_at": None},
        after={"verified_at": measurement.verified_at.isoformat(), "verified_by": measurement.verified_by},
    )
    return measurement


def job_report_allowed(*, job: Job, user) -> None:
    """Only members (not viewers) of the job's project, or staff, may post for it (403 otherwise)."""
    from apps.accounts.models import Membership
    from apps.accounts.selectors import user_role

    role = user_role(user, job.project)
    if role is None:
        raise PermissionDenied(_("You can report throughput only for jobs of your projects."))
    if role == Membership.Role.VIEWER:
        raise PermissionDenied(_("Viewers cannot report throughput; ask a project member."))


# ---------------------------------------------------------------------------- synthetic results


def _noise(seed: str, spread: float = 0.03) -> float:
    """A repeatable factor in [1 - spread, 1 + spread] from ``seed`` (no global random state)."""
    digest = hashlib.sha256(seed.encode()).digest()
    unit = int.from_bytes(digest[:8], "big") / 2**64
    return 1 - spread + 2 * spread * unit


def relevant_peak(profile: WorkloadProfile, model: DeviceModel) -> float | None:
    """The catalog peak (tera-operations/s) a compute-bound profile runs at, by the profile's precision:

    * ``int8`` (quantised inference): dense INT8 TOPS only — a card whose INT8 peak the catalog does not
      know gets nothing, never a figure scaled from its FP16 peak;
    * ``bf16`` (training): dense BF16 tensor TFLOPS, else dense FP16 (a card without BF16, e.g. T4 or
      V100, trains in FP16 mixed precision);
    * ``fp16`` and anything else: dense FP16 tensor TFLOPS, else dense BF16.

    None when that peak is unknown (unknown stays unknown)."""
    precision = (profile.precision or "").strip().lower()
    if precision == "int8":
        order = (model.int8_tops,)
    elif precision == "bf16":
        order = (model.bf16_dense_tflops, model.fp16_dense_tflops)
    else:
        order = (model.fp16_dense_tflops, model.bf16_dense_tflops)
    return next((float(t) for t in order if t), None)


def synthetic_throughput(profile: WorkloadProfile, model: DeviceModel, share: Decimal, seed: str = ""):
    """(throughput, p99 latency ms or None) a card could plausibly give, from the catalog's peak.

    compute-bound: efficiency × the peak of the profile's precision (``relevant_peak``) × 1e12 ÷ operations
    per unit; bandwidth-bound (decode): efficiency × batch × memory bandwidth ÷ bytes read per step.
    A slice gets its compute share (× 0.95 for the partition's overhead). None when the catalog does not
    know the relevant peak: the demo then shows "no data" for that model rather than a made-up figure.
    """
    spec = profile.synthetic or {}
    bound = spec.get("bound")
    fraction = float(share) / 100 * (0.95 if share < 100 else 1.0)
    if bound == "compute":
        peak = relevant_peak(profile, model)
        if not peak or not spec.get("work_per_unit"):
            return None
        value = float(spec.get("efficiency", 0.3)) * peak * 1e12 / float(spec["work_per_unit"]) * fraction
    elif bound == "bandwidth":
        if not model.memory_bandwidth_gbs or not spec.get("bytes_per_step"):
            return None
        value = (
            float(spec.get("efficiency", 0.5))
            * float(spec.get("batch", 1))
            * float(model.memory_bandwidth_gbs)
            * 1e9
            / float(spec["bytes_per_step"])
            * fraction
        )
    else:
        return None
    value *= _noise(seed)
    latency = None
    if profile.latency_bound and spec.get("latency_ms_base"):
        # Latency grows as the slice shrinks (fewer SMs for the same batch).
        latency = Decimal(
            str(round(float(spec["latency_ms_base"]) / max(fraction, 0.05) * _noise(seed + "l"), 2))
        )
    return Decimal(str(round(value, 3))), latency


@transaction.atomic
def synthetic_result(*, job: Job, actor="simulated-backend") -> Measurement | None:
    """The simulated backend's report at the end of a benchmark job (marked synthetic)."""
    if job.kind != Job.Kind.BENCHMARK or not job.workload_profile_id:
        return None
    if Measurement.objects.filter(job=job, source_label=f"job {job.pk} attempt {job.attempt}").exists():
        return None  # reported already (idempotent: reconcile may see the end twice)
    model, template, share, cards, device, node, driver = _job_shape(job)
    result = synthetic_throughput(
        job.workload_profile, model, share, seed=f"{job.pk}:{job.attempt}:{device.pk}"
    )
    if result is None:
        return None
    per_instance, latency = result
    runs = 1  # one simulated figure: the platform counts what it aggregated, never more
    measurement = Measurement.objects.create(
        profile=job.workload_profile,
        device_model=model,
        template=template,
        compute_share=share,
        cards=cards * job.replicas,
        throughput=(per_instance * cards * job.replicas).quantize(Decimal("0.001")),
        p99_latency_ms=latency,
        runs=runs,
        spread_pct=Decimal(str(round((_noise(f"{job.pk}s", 0.5) - 0.5) * 8 + 4, 1))),
        synthetic=True,
        source=Measurement.Source.BENCHMARK,
        source_label=f"job {job.pk} attempt {job.attempt}",
        device=device,
        node=node,
        job=job,
        driver_version=driver,
        measured_at=timezone.now(),
    )
    change_record_create(
        actor=actor,
        action="measurement.synthetic",
        obj=measurement,
        after={"profile": job.workload_profile.key, "job": job.pk, "throughput": str(measurement.throughput)},
    )
    return measurement


def measurement_from_benchmark_run(run, *, profile: WorkloadProfile) -> Measurement:
    """A gray-batch benchmark run (``rollout.BenchmarkRun``) of a whole card on a node, in the library."""
    device = run.node.devices.exclude(device_model__isnull=True).select_related("device_model").first()
    if device is None:
        raise ValidationFailed(
            _("Node %(node)s has no card of a known model to attribute the run to.")
            % {"node": run.node.name},
            details={"node": ["no known model"]},
        )
    if str(run.unit or "").strip() and str(run.unit).strip() != profile.unit:
        raise ValidationFailed(
            _("The run is in %(unit)s but profile %(profile)s measures %(expected)s.")
            % {"unit": run.unit, "profile": profile.key, "expected": profile.unit},
            details={"unit": ["does not match the profile"]},
        )
    return Measurement.objects.create(
        profile=profile,
        device_model=device.device_model,
        compute_share=Decimal(100),
        cards=1,
        throughput=run.throughput,
        runs=1,
        source=Measurement.Source.GRAY_BATCH,
        source_label=(f"benchmark run {run.pk}" + (f" (batch {run.batch.name})" if run.batch_id else ""))[
            :200
        ],
        device=device,
        node=run.node,
        job=run.job,
        driver_version=run.node.driver_version or "",
        measured_at=run.measured_at,
        # A harness that says its figure is simulated (source "simulated:…", as the demo's loaders do)
        # gets it marked synthetic on every page; marking is only ever more cautious.
        synthetic=str(run.source or "").startswith(SIMULATED_SOURCE_PREFIX),
    )


# ---------------------------------------------------------------------------- coefficient proposals


def per_card_throughput(profile: WorkloadProfile, model: DeviceModel) -> dict | None:
    """The measured whole-card-equivalent throughput of ``model`` on ``profile`` (mean weighted by runs ×
    share) from trusted measurements only (benchmark runs, staff-verified reports), with the measurement
    count; None without any."""
    rows = list(Measurement.objects.filter(trusted_q(), profile=profile, device_model=model))
    if not rows:
        return None
    weights = [Decimal(m.runs) * Decimal(m.compute_share) / 100 for m in rows]
    mean = sum((m.per_card * w for m, w in zip(rows, weights, strict=True)), Decimal(0)) / sum(
        weights, Decimal(0)
    )
    return {"per_card": mean, "measurements": len(rows), "synthetic": any(m.synthetic for m in rows)}


def measured_ratios(model: DeviceModel, reference: DeviceModel) -> dict[str, dict]:
    """{profile key: {"ratio", "model_per_card", "reference_per_card", "measurements", "synthetic"}}: the
    measured throughput of ``model`` over ``reference`` per profile both were measured on."""
    out: dict[str, dict] = {}
    measured = Measurement.objects.filter(trusted_q(), device_model=model).values("profile_id")
    for profile in WorkloadProfile.objects.filter(pk__in=measured):
        mine, theirs = per_card_throughput(profile, model), per_card_throughput(profile, reference)
        if not mine or not theirs:
            continue
        a, b = mine["per_card"], theirs["per_card"]
        out[profile.key] = {
            "ratio": str((a / b).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)),
            "model_per_card": str(a.quantize(Decimal("0.01"))),
            "reference_per_card": str(b.quantize(Decimal("0.01"))),
            "measurements": mine["measurements"] + theirs["measurements"],
            "synthetic": mine["synthetic"] or theirs["synthetic"],
        }
    return out


def _reference() -> DeviceModel | None:
    return DeviceModel.objects.filter(slug=REFERENCE_MODEL_SLUG).first()


@transaction.atomic
def coefficient_proposals_refresh(*, actor="worker") -> list[CoefficientProposal]:
    """Open a proposal for every model whose measured ratio to the reference card (geometric mean over
    profiles, normalised by the reference's own coefficient) differs from its coefficient by more than
    15 %. An open proposal is updated in place; nothing is proposed without trusted measurements of both,
    and an open proposal they no longer back (e.g. one made from job reports before issue 27) is withdrawn.
    """
    reference = _reference()
    if reference is None:
        return []
    # Only benchmark runs and staff-verified reports propose: a project's own reports never change bills.
    measured = Measurement.objects.filter(trusted_q()).values("device_model_id")
    models = list(DeviceModel.objects.filter(pk__in=measured).exclude(pk=reference.pk))
    open_proposals = CoefficientProposal.objects.filter(state=CoefficientProposal.State.OPEN)
    open_proposals.exclude(device_model__in=models).delete()
    coefficients = coefficients_on([m.pk for m in models] + [reference.pk])
    ref_coef = coefficients.get(reference.pk)
    out = []
    for model in models:
        current = coefficients.get(model.pk)
        ratios = {k: r for k, r in measured_ratios(model, reference).items() if Decimal(r["ratio"]) > 0}
        proposed = Decimal(0)
        if current and ref_coef and ratios:
            geo = math.exp(sum(math.log(float(r["ratio"])) for r in ratios.values()) / len(ratios))
            proposed = (Decimal(str(geo)) * ref_coef).quantize(Decimal("0.0001"))
        unfit = proposed <= 0 or proposed > column_limits(CoefficientProposal, "proposed_value")[0]
        if unfit or abs(proposed - current) / current <= PROPOSAL_THRESHOLD:
            open_proposals.filter(device_model=model).delete()
            continue
        proposal, _created = CoefficientProposal.objects.update_or_create(
            device_model=model,
            state=CoefficientProposal.State.OPEN,
            defaults={
                "reference_model": reference,
                "current_value": current,
                "proposed_value": proposed,
                "evidence": ratios,
            },
        )
        out.append(proposal)
    return out


@transaction.atomic
def coefficient_proposal_decide(
    *, proposal: CoefficientProposal, accept: bool, actor, effective_from: date | None = None
) -> CoefficientProposal:
    """Accept (a new coefficient version from ``effective_from``, default tomorrow) or dismiss.

    The effective date must be after today: metering already done and closed months keep the
    coefficient they were priced with."""
    proposal = CoefficientProposal.objects.select_for_update().get(pk=proposal.pk)
    if proposal.state != CoefficientProposal.State.OPEN:
        raise Conflict(_("This proposal was already %(state)s.") % {"state": proposal.get_state_display()})
    label = actor_fields(actor)["actor_label"]
    if not accept:
        proposal.state = CoefficientProposal.State.DISMISSED
        proposal.decided_by = label
        proposal.save(update_fields=["state", "decided_by", "updated_at"])
        change_record_create(actor=actor, action="coefficient_proposal.dismiss", obj=proposal)
        return proposal
    today = timezone.localdate()
    effective = effective_from or today + timedelta(days=1)
    if effective <= today:
        raise ValidationFailed(
            _(
                "A new coefficient takes effect after today (from %(day)s at the earliest), so past metering "
                "and closed bills are never rewritten."
            )
            % {"day": (today + timedelta(days=1)).isoformat()},
            details={"effective_from": ["must be after today"]},
        )
    if ComputeCoefficient.objects.filter(
        device_model=proposal.device_model, effective_from=effective
    ).exists():
        raise Conflict(
            _("%(model)s already has a coefficient from %(day)s.")
            % {"model": proposal.device_model.name, "day": effective.isoformat()}
        )
    evidence = ", ".join(f"{k} {v['ratio']}" for k, v in sorted(proposal.evidence.items()))
    coefficient = ComputeCoefficient.objects.create(
        device_model=proposal.device_model,
        value=proposal.proposed_value,
        effective_from=effective,
        basis=ComputeCoefficient.Basis.BENCHMARK,
        reason=(COEFFICIENT_REASON % {"proposal": proposal.pk, "evidence": evidence})[:300],
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    proposal.state = CoefficientProposal.State.ACCEPTED
    proposal.effective_from = effective
    proposal.decided_by = label
    proposal.save(update_fields=["state", "effective_from", "decided_by", "updated_at"])
    change_record_create(
        actor=actor,
        action="coefficient_proposal.accept",
        obj=proposal,
        after={
            "coefficient": coefficient.pk,
            "value": str(coefficient.value),
            "effective_from": effective.isoformat(),
        },
    )
    return proposal
