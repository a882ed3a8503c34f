"""Writes for the device catalog: loading the built-in catalog (device models from ``data/device_models.yaml``)
and versioning compute coefficients."""

from __future__ import annotations

from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from apps.catalog.models import (
    ComputeCoefficient,
    DeviceModel,
)
from apps.catalog.upsert import synced_upsert
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict, ValidationFailed
from apps.core.validation import validate, validate_and_save

DEFAULT_CATALOG_PATH = Path(__file__).resolve().parents[1] / "data" / "device_models.yaml"

# Coefficients created by catalog_sync for models that have none yet.
SYNC_COEFFICIENT_EFFECTIVE_FROM = date(2024, 1, 1)
SYNC_COEFFICIENT_REASON = "dense FP16/BF16 TFLOPS ÷ 312 (catalog)"

_DECIMAL_FIELDS = (
    "memory_bandwidth_gbs",
    "fp16_dense_tflops",
    "bf16_dense_tflops",
    "fp32_tflops",
    "int8_tops",
    "interconnect_bandwidth_gbs",
)
_INT_FIELDS = ("memory_mib", "tdp_w", "ai_cores")
# CharFields: null in the file (unknown) is stored as "".
_TEXT_FIELDS = (
    "vendor",
    "kind",
    "name",
    "architecture",
    "memory_type",
    "interconnect",
    "confidence",
    "notes",
)
_LIST_FIELDS = ("features", "k8s_resource_names", "product_names", "pci_device_ids", "sources")
_DICT_FIELDS = ("mig_profiles", "vnpu_templates")
SYNCED_FIELDS = (*_TEXT_FIELDS, *_DECIMAL_FIELDS, *_INT_FIELDS, *_LIST_FIELDS, *_DICT_FIELDS, "is_builtin")
_KNOWN_KEYS = {"slug", *SYNCED_FIELDS} - {"is_builtin"}


def _actor_user(actor: Any):
    """The user to store in created_by: only a real (saved) user, never a label or an agent."""
    if getattr(actor, "is_authenticated", False) and not getattr(actor, "is_agent", False):
        return actor if getattr(actor, "pk", None) else None
    return None


def _save_or_conflict(obj: Any, message: str, details: dict[str, list[str]]) -> None:
    """Save in a savepoint: a unique clash raises Conflict(message, details) and leaves the outer transaction usable."""
    try:
        with transaction.atomic():
            obj.save()
    except IntegrityError:
        raise Conflict(message, details=details)


def _catalog_rows(path: Path) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ValidationFailed(
            _("cannot read the catalog file %(path)s: %(error)s") % {"path": path, "error": exc.strerror}
        )
    except yaml.YAMLError as exc:
        raise ValidationFailed(
            _("the catalog file %(path)s is not valid YAML: %(error)s") % {"path": path, "error": exc}
        )
    if (
        not isinstance(data, dict)
        or data.get("schema_version") != 1
        or not isinstance(data.get("device_models"), list)
    ):
        raise ValidationFailed(
            _("%(path)s: expected 'schema_version: 1' and a 'device_models' list") % {"path": path}
        )
    rows = data["device_models"]
    seen: set[str] = set()
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not row.get("slug"):
            raise ValidationFailed(
                _("%(path)s: device_models[%(index)d] has no slug") % {"path": path, "index": index}
            )
        unknown = set(row) - _KNOWN_KEYS
        if unknown:
            raise ValidationFailed(
                _("%(path)s: device_models[%(index)d] (%(slug)s) has unknown keys %(keys)s")
                % {"path": path, "index": index, "slug": row["slug"], "keys": sorted(unknown)}
            )
        if row["slug"] in seen:
            raise ValidationFailed(
                _("%(path)s: slug %(slug)r appears twice") % {"path": path, "slug": row["slug"]}
            )
        seen.add(row["slug"])
    return rows


def _field_values(row: dict[str, Any]) -> dict[str, Any]:
    """Catalog row -> model field values (absent keys mean unknown, like null)."""
    slug = row["slug"]
    values: dict[str, Any] = {"is_builtin": True}
    for name in _TEXT_FIELDS:
        value = row.get(name)
        values[name] = "" if value is None else str(value).strip()
    for name in _DECIMAL_FIELDS:
        value = row.get(name)
        try:
            values[name] = None if value is None else Decimal(str(value))
        except InvalidOperation:
            raise ValidationFailed(
                _("catalog row %(slug)s: %(field)s %(value)r is not a number")
                % {"slug": slug, "field": name, "value": value}
            )
    for name in _INT_FIELDS:
        value = row.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValidationFailed(
                _("catalog row %(slug)s: %(field)s %(value)r must be a whole number or null")
                % {"slug": slug, "field": name, "value": value}
            )
        values[name] = value
    for name in _LIST_FIELDS:
        value = row.get(name) or []
        if not isinstance(value, list):
            raise ValidationFailed(
                _("catalog row %(slug)s: %(field)s must be a list") % {"slug": slug, "field": name}
            )
        values[name] = [str(v) for v in value]
    for name in _DICT_FIELDS:
        value = row.get(name) or {}
        if not isinstance(value, dict):
            raise ValidationFailed(
                _("catalog row %(slug)s: %(field)s must be a mapping") % {"slug": slug, "field": name}
            )
        values[name] = value
    return values


def _save(model: DeviceModel) -> None:
    validate_and_save(model, what=f"catalog row {model.slug}")


@transaction.atomic
def catalog_sync(*, actor, path: str | Path | None = None) -> dict[str, int]:
    """Upsert the built-in device models from the catalog file, by slug. Idempotent.

    Rows in the database that the file no longer lists are left alone (devices may point at them).
    A model whose default coefficient is known and that has no coefficient yet gets one (basis tflops,
    effective 2024-01-01); existing coefficients are never changed here: they are versioned by
    compute_coefficient_set.

    Returns {"created", "updated", "unchanged", "coefficients_created"}.
    """
    path = Path(path) if path else DEFAULT_CATALOG_PATH
    rows = _catalog_rows(path)
    existing = {
        m.slug: m for m in DeviceModel.objects.select_for_update().filter(slug__in=[r["slug"] for r in rows])
    }
    counts = {"created": 0, "updated": 0, "unchanged": 0, "coefficients_created": 0}
    synced: list[DeviceModel] = []
    for row in rows:
        values = _field_values(row)
        model = existing.get(row["slug"]) or DeviceModel(slug=row["slug"], **values)
        outcome, _reason = synced_upsert(
            model,
            values,
            fields=SYNCED_FIELDS,
            save=_save,
            actor=actor,
            action="device_model.sync",
            created_fields=["slug", *SYNCED_FIELDS],
            created_message="created from the catalog file",
            updated_message="updated from the catalog file",
        )
        counts[outcome] += 1
        synced.append(model)

    with_coefficient = set(
        ComputeCoefficient.objects.filter(device_model__in=synced).values_list("device_model_id", flat=True)
    )
    created_by = _actor_user(actor)
    for model in synced:
        value = model.default_coefficient()
        if value is None or model.pk in with_coefficient:
            continue
        coefficient = ComputeCoefficient(
            device_model=model,
            value=value,
            effective_from=SYNC_COEFFICIENT_EFFECTIVE_FROM,
            basis=ComputeCoefficient.Basis.TFLOPS,
            reason=SYNC_COEFFICIENT_REASON,
            created_by=created_by,
        )
        validate_and_save(coefficient, what="compute coefficient")
        change_record_create(
            actor=actor,
            action="compute_coefficient.set",
            obj=coefficient,
            after=snapshot(coefficient, ["device_model", "value", "effective_from", "basis", "reason"]),
            message="default coefficient from the catalog",
        )
        counts["coefficients_created"] += 1
    return counts


def compute_coefficient_check(
    *, device_model: DeviceModel, value: Any, effective_from: date, basis: str, reason: str
) -> Decimal:
    """Validate a new coefficient without writing; returns the value as a Decimal.

    Raises ValidationFailed (bad value, basis or missing reason) or Conflict (date already taken).
    Shared by compute_coefficient_set and the admin form.
    """
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValidationFailed(
            _("coefficient %(value)r is not a number") % {"value": value}, details={"value": ["not a number"]}
        )
    if not number.is_finite() or number <= 0:
        raise ValidationFailed(
            _("a compute coefficient must be greater than 0 (got %(value)s)") % {"value": value},
            details={"value": ["must be > 0"]},
        )
    if number >= Decimal("10000") or number != number.quantize(Decimal("0.0001")):
        raise ValidationFailed(
            _("coefficient %(value)s does not fit: at most 4 digits before and 4 after the decimal point")
            % {"value": value},
            details={"value": ["at most 4 decimal places, below 10000"]},
        )
    if basis not in ComputeCoefficient.Basis.values:
        raise ValidationFailed(
            _("unknown basis %(basis)r; use one of %(choices)s")
            % {"basis": basis, "choices": ", ".join(ComputeCoefficient.Basis.values)},
            details={"basis": ["unknown basis"]},
        )
    if basis == ComputeCoefficient.Basis.POLICY and not (reason or "").strip():
        raise ValidationFailed(
            _("a coefficient set by platform policy needs a reason"),
            details={"reason": ["required for basis policy"]},
        )
    taken = (
        ComputeCoefficient.objects.filter(device_model=device_model, effective_from=effective_from)
        .values_list("value", flat=True)
        .first()
    )
    if taken is not None:
        raise Conflict(
            _(
                "%(model)s already has a coefficient (%(value)s) effective from %(day)s; coefficients are "
                "versioned by date: choose another effective date"
            )
            % {"model": device_model.name, "value": taken, "day": effective_from.isoformat()},
            details={"effective_from": ["already taken for this device model"]},
        )
    return number.quantize(Decimal("0.0001"))


@transaction.atomic
def compute_coefficient_set(
    *, device_model: DeviceModel, value: Decimal, effective_from: date, basis: str, reason: str, actor
) -> ComputeCoefficient:
    """Add a coefficient version for a device model from a date on (the newest row effective on a day applies)."""
    # Serialise writers for this model so the date check below cannot race.
    DeviceModel.objects.select_for_update().only("pk").get(pk=device_model.pk)
    number = compute_coefficient_check(
        device_model=device_model, value=value, effective_from=effective_from, basis=basis, reason=reason
    )
    coefficient = ComputeCoefficient(
        device_model=device_model,
        value=number,
        effective_from=effective_from,
        basis=basis,
        reason=(reason or "").strip(),
        created_by=_actor_user(actor),
    )
    validate(coefficient, what="compute coefficient", validate_constraints=False)
    _save_or_conflict(
        coefficient,
        _("%(model)s already has a coefficient effective from %(day)s")
        % {"model": device_model.name, "day": effective_from.isoformat()},
        {"effective_from": ["already taken for this device model"]},
    )
    change_record_create(
        actor=actor,
        action="compute_coefficient.set",
        obj=coefficient,
        after=snapshot(coefficient, ["device_model", "value", "effective_from", "basis", "reason"]),
    )
    return coefficient
