"""What a measurement may say: bounds the database column holds, and a ceiling from the catalog's peak.

Two checks, both before anything is written (issue 27 §3):

* **column bounds** (``column_value``): a figure is rounded to the column's decimal places and must lie in
  ``(0, largest value the column holds]`` — read from the model field (``max_digits`` and
  ``decimal_places``), so SQLite, which stores an oversized decimal and then fails on every read, and
  PostgreSQL, which refuses it with a database error, both get the same 400 before the write;
* **plausibility** (``throughput_ceiling``): a job-reported throughput is at most a stated factor above what
  the card's catalog peak allows for the profile's work, per whole-card equivalent, times the cards and the
  share of a card the job had:

  - compute-bound profiles: the card's highest known peak rate (dense FP16/BF16/FP32 TFLOPS or INT8 TOPS)
    ÷ the profile's FLOPs per unit, × 2 — 2:4 structured sparsity doubles tensor-core math throughput
    (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020, "Fine-grained structured sparsity");
  - bandwidth-bound profiles (decode): memory bandwidth × batch ÷ bytes read per step, the batch taken as
    at least 256 concurrent sequences, vLLM's default ``max_num_seqs`` (vllm ``EngineArgs``), since the
    simulator's batch is only its own assumption;
  - where the catalog does not know the peak (or the profile has no work figure), unknown stays unknown:
    the ceiling is 2 × the best per-card figure a trusted measurement (benchmark run or staff-verified)
    found for this profile on this model; with neither, the report is refused — nothing to check it by.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django.utils.translation import gettext as _

from apps.catalog.models import DeviceModel, WorkloadProfile
from apps.core.errors import Conflict, ValidationFailed
from apps.core.formatting import plain_decimal

SPARSITY_FACTOR = Decimal(2)
SERVING_BATCH = Decimal(256)
TRUSTED_FACTOR = Decimal(2)


def column_limits(model, name: str) -> tuple[Decimal, Decimal]:
    """(largest value, quantum) a ``DecimalField`` column holds: 10^(digits - places) - 10^-places."""
    field = model._meta.get_field(name)
    quantum = Decimal(1).scaleb(-field.decimal_places)
    return Decimal(10) ** (field.max_digits - field.decimal_places) - quantum, quantum


def column_value(value: Decimal, *, model, field: str, name: str, upper: Decimal | None = None) -> Decimal:
    """``value`` rounded to the column's places; a 400 unless 0 < rounded ≤ min(column max, ``upper``)."""
    largest, quantum = column_limits(model, field)
    if upper is not None:
        largest = min(largest, upper)
    # Compared before rounding: quantizing 1e30 to 4 places would overflow Decimal's 28-digit context.
    in_range = value.is_finite() and 0 < value <= largest
    if not in_range or value.quantize(quantum, rounding=ROUND_HALF_UP) <= 0:
        raise ValidationFailed(
            _("%(name)s must be greater than 0 and at most %(max)s (rounded to %(quantum)s).")
            % {"name": name, "max": largest, "quantum": quantum},
            details={name: ["out of range"]},
        )
    return value.quantize(quantum, rounding=ROUND_HALF_UP)


def catalog_peak_per_card(profile: WorkloadProfile, model: DeviceModel) -> Decimal | None:
    """Units/s one whole card could give at most by the catalog's peak (× the margins above), or None."""
    spec = profile.synthetic or {}
    if spec.get("bound") == "compute" and spec.get("work_per_unit"):
        rates = [
            Decimal(t)
            for t in (model.bf16_dense_tflops, model.fp16_dense_tflops, model.fp32_tflops, model.int8_tops)
            if t
        ]
        if not rates:
            return None
        return max(rates) * Decimal("1e12") / Decimal(str(spec["work_per_unit"])) * SPARSITY_FACTOR
    if spec.get("bound") == "bandwidth" and spec.get("bytes_per_step") and model.memory_bandwidth_gbs:
        batch = max(Decimal(str(spec.get("batch", 1))), SERVING_BATCH)
        return (
            Decimal(model.memory_bandwidth_gbs)
            * Decimal("1e9")
            * batch
            / Decimal(str(spec["bytes_per_step"]))
        )
    return None


def throughput_ceiling(
    profile: WorkloadProfile, model: DeviceModel, *, share: Decimal, cards: int, trusted_best: Decimal | None
) -> tuple[Decimal, str]:
    """(the highest plausible throughput of ``cards`` instances at ``share`` % of a card, its basis)."""
    per_card = catalog_peak_per_card(profile, model)
    basis = "catalog"
    if per_card is None and trusted_best is not None:
        per_card, basis = trusted_best * TRUSTED_FACTOR, "measured"
    if per_card is None:
        raise Conflict(
            _(
                "The catalog knows no peak of %(model)s for %(profile)s and no benchmark run measured it, so a "
                "job's figure cannot be checked; ask platform staff for a benchmark run first."
            )
            % {"model": model.name, "profile": profile.key},
            code="not_checkable",
        )
    return (per_card * Decimal(cards) * Decimal(share) / 100).quantize(Decimal("0.0001")), basis


def check_plausible(
    throughput: Decimal,
    *,
    profile: WorkloadProfile,
    model: DeviceModel,
    share: Decimal,
    cards: int,
    trusted_best: Decimal | None,
) -> None:
    """A 400 naming the ceiling and its basis when ``throughput`` is above it."""
    ceiling, basis = throughput_ceiling(profile, model, share=share, cards=cards, trusted_best=trusted_best)
    if throughput <= ceiling:
        return
    if basis == "catalog":
        reason = _(
            "%(throughput)s %(unit)s is not plausible for %(cards)s × %(share)s %% of a %(model)s on "
            "%(profile)s: its catalog peak allows at most %(ceiling)s."
        )
    else:
        reason = _(
            "%(throughput)s %(unit)s is not plausible for %(cards)s × %(share)s %% of a %(model)s on "
            "%(profile)s: at most %(ceiling)s, twice the best benchmark run (the catalog knows no peak)."
        )
    raise ValidationFailed(
        reason
        % {
            "throughput": throughput,
            "unit": profile.unit,
            "cards": cards,
            "share": plain_decimal(share),
            "model": model.name,
            "profile": profile.key,
            "ceiling": ceiling,
        },
        details={"throughput": ["implausible"]},
    )
