"""Writes for the device catalog: loading the built-in catalog, versioning compute coefficients,
compute templates (算力模板) and device request templates."""

from __future__ import annotations

from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils.text import slugify
from django.utils.translation import gettext as _

from apps.catalog import request_spec, selectors
from apps.catalog.mig import carve, layout_problem_text, model_geometry
from apps.catalog.models import (
    ComputeCoefficient,
    ComputeTemplate,
    DeviceModel,
    DeviceRequestTemplate,
    Isolation,
)
from apps.catalog.partitions import (
    MIB_PER_GIB,
    MIG,
    PartitionProfile,
    ProfileError,
    partition_profile,
    partition_profiles,
    share_percent,
    whole_gib_mib,
)
from apps.catalog.upsert import synced_upsert
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict, ParseFailed, ValidationFailed
from apps.core.stored_text import localize, stored
from apps.core.validation import validate, validate_and_save, validation_details, validation_message

DEFAULT_CATALOG_PATH = Path(__file__).resolve().parent / "data" / "device_models.yaml"

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
        coefficient.full_clean()
        coefficient.save()
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


# ------------------------------------------------------------------ compute templates (算力模板)

TEMPLATE_FIELDS = (
    "device_model",
    "name",
    "slug",
    "memory_mib",
    "compute_share",
    "isolation",
    "partition_profile",
    "max_instances",
    "description",
)
_EDITABLE_FIELDS = frozenset(TEMPLATE_FIELDS)
_AUDIT_FIELDS = [*TEMPLATE_FIELDS, "is_builtin", "is_retired"]


def _first_message(details: dict[str, list[str]]) -> str:
    for field, messages in details.items():
        if messages:
            return messages[0] if field in ("__all__", "non_field_errors") else f"{field}: {messages[0]}"
    return "invalid input"


def _template_invalid(error: DjangoValidationError) -> ValidationFailed:
    details = validation_details(error)
    if "__all__" in details:
        details["non_field_errors"] = details.pop("__all__")
    return ValidationFailed(validation_message("compute template", details), details=details)


def _as_decimal(value: Any, field: str) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValidationFailed(
            _("%(field)s: %(value)r is not a number") % {"field": field, "value": value},
            details={field: ["not a number"]},
        )
    if not number.is_finite():
        raise ValidationFailed(
            _("%(field)s: %(value)r is not a number") % {"field": field, "value": value},
            details={field: ["not a number"]},
        )
    return number


def _instances_that_fit(
    model: DeviceModel | None, memory_mib: int | None, share: Decimal | None
) -> int | None:
    """How many instances of a soft slice one card holds: by compute share (100 / share) and, where the
    catalog knows the card's memory, by memory; None when neither is known (the caller's default)."""
    counts = []
    if share is not None and share > 0:
        counts.append(int(Decimal(100) // share))
    if memory_mib and model is not None and model.memory_mib:
        counts.append(model.memory_mib // memory_mib)
    return max(1, min(counts)) if counts else None


def _profile_or_none(model: DeviceModel | None, name: str) -> PartitionProfile | None:
    if model is None or not name:
        return None
    try:
        return partition_profile(model, name)
    except ProfileError:
        return None  # clean() reports it on the partition_profile field


def _template_slug_base(model: DeviceModel, name: str) -> str:
    """ "A100 80GB SXM4 · MIG 3g.40gb (copy)" on a100-80gb-sxm4 -> "a100-80gb-sxm4-mig-3g-40gb-copy"."""
    text = slugify(name.replace(".", "-").replace("+", "-"))
    return text if text.startswith(model.slug) else f"{model.slug}-{text}".strip("-")


def _unique_template_slug(base: str, *, exclude_pk: int | None = None) -> str:
    base = (slugify(base) or "template")[:110]
    taken = set(
        ComputeTemplate.objects.filter(slug__startswith=base)
        .exclude(pk=exclude_pk)
        .values_list("slug", flat=True)
    )
    slug, n = base, 2
    while slug in taken:
        slug = f"{base}-{n}"
        n += 1
    return slug


def compute_template_build(
    *,
    device_model: DeviceModel | None,
    name: str,
    memory_mib: int | None = None,
    compute_share: Decimal | str | int | None = None,
    isolation: str = Isolation.HARD,
    partition_profile: str = "",
    max_instances: int | None = None,
    slug: str = "",
    description: str = "",
    instance: ComputeTemplate | None = None,
) -> ComputeTemplate:
    """An unsaved, validated template (the editor's live preview and the create/update services).

    A partition profile fills what it fixes when left out: memory, compute share and the instance
    count (the vendor's count, lowered to what fits the card). Without a profile, max_instances
    defaults to as many instances as the card holds (``_instances_that_fit``: a 50 % slice, 2).
    Raises ValidationFailed with field errors.
    """
    profile_name = (partition_profile or "").strip()
    profile = _profile_or_none(device_model, profile_name)
    share = _as_decimal(compute_share, "compute_share")
    if profile is not None:
        memory_mib = profile.memory_mib if memory_mib is None else memory_mib
        share = profile.compute_share if share is None else share
        max_instances = profile.default_instances if max_instances is None else max_instances
    template = instance or ComputeTemplate()
    template.device_model = device_model
    template.name = (name or "").strip()
    template.memory_mib = memory_mib
    template.compute_share = share
    template.isolation = str(isolation or Isolation.HARD.value)
    template.partition_profile = profile_name
    if max_instances is None and profile is None:
        max_instances = _instances_that_fit(device_model, memory_mib, share)
    template.max_instances = 1 if max_instances is None else max_instances
    template.description = (description or "").strip()
    template.slug = (slug or "").strip() or template.slug or ""
    if not template.slug and device_model is not None and template.name:
        template.slug = _unique_template_slug(
            _template_slug_base(device_model, template.name), exclude_pk=template.pk
        )
    # clean() covers every check constraint with a readable message; the name is unique per model.
    errors: dict[str, list[str]] = {}
    try:
        template.full_clean(validate_constraints=False)
    except DjangoValidationError as exc:
        errors = validation_details(exc)
    if profile_name and profile is None:
        # An unknown profile is the one error: the fields it would have filled stay empty, and
        # "cannot be null" on each of them says nothing more (issue 29 §9).
        for field in ("memory_mib", "compute_share", "max_instances"):
            if getattr(template, field) is None:
                errors.pop(field, None)
    if (
        device_model is not None
        and template.name
        and "name" not in errors
        and ComputeTemplate.objects.filter(device_model=device_model, name=template.name)
        .exclude(pk=template.pk)
        .exists()
    ):
        errors["name"] = [f"{device_model.name} already has a template named {template.name!r}"]
    if (
        device_model is not None
        and profile is not None
        and profile.kind == MIG
        and not {"partition_profile", "max_instances"} & errors.keys()
    ):
        # MIG geometry: max_instances x the profile must be carvable on one card (NVIDIA placements)
        geometry = model_geometry(device_model.name)
        if geometry is not None:
            problem = layout_problem_text(geometry, [profile.name] * template.max_instances)
            if problem:
                errors["max_instances"] = [problem]
    if errors:
        raise _template_invalid(DjangoValidationError(errors))
    template.compute_share = template.compute_share.quantize(Decimal("0.01"))  # 25 -> 25.00, same value
    return template


def mig_layout_check(device_model: DeviceModel, layout: Any) -> dict[str, Any]:
    """Whether a per-card MIG layout (profile -> count, e.g. {"3g.40gb": 1, "4g.40gb": 1}) can be carved.

    Returns {"model", "geometry", "instances": [{"profile", "start", "size"}]} with a start slot for
    every instance; raises ValidationFailed (400) saying precisely why when no placement exists, the
    model has no sourced geometry, or the input is malformed.
    """
    from django.utils.translation import gettext as _

    if not isinstance(layout, dict) or not layout:
        raise ValidationFailed(
            _('Give the layout as profile -> count, e.g. {"3g.40gb": 1, "4g.40gb": 1}.'),
            details={"layout": [_("a non-empty object of profile -> count")]},
        )
    names: list[str] = []
    for name, count in layout.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
            raise ValidationFailed(
                _("Layout %(profile)s: the count must be a whole number from 1 to 64.") % {"profile": name},
                details={"layout": [_("%(profile)s: count 1-64") % {"profile": name}]},
            )
        names.extend([str(name)] * count)
    geometry = model_geometry(device_model.name)
    if geometry is None:
        message = _(
            "The catalog has no sourced MIG placements for %(model)s, so a layout cannot be checked "
            "(ingest the card's nvidia-smi mig -lgipp output)."
        ) % {"model": device_model.name}
        raise ValidationFailed(message, details={"layout": [message]})
    problem = layout_problem_text(geometry, names)
    if problem:
        raise ValidationFailed(problem, details={"layout": [problem]})
    starts = carve(geometry, names) or []
    return {
        "model": device_model.name,
        "geometry": geometry.key,
        "memory_slices": geometry.memory_slices,
        "compute_slices": geometry.compute_slices,
        "instances": sorted(
            (
                {"profile": n, "start": st, "size": geometry.profiles[n].size}
                for n, st in zip(names, starts, strict=True)
            ),
            key=lambda item: item["start"],
        ),
        "source": list(geometry.source),
    }


def _save_template(template: ComputeTemplate) -> None:
    _save_or_conflict(
        template,
        _("a compute template named %(name)r or with slug %(slug)r already exists")
        % {"name": template.name, "slug": template.slug},
        {"name": ["already taken for this device model"], "slug": ["already taken"]},
    )


@transaction.atomic
def compute_template_create(
    *,
    actor,
    device_model: DeviceModel,
    name: str,
    memory_mib: int | None = None,
    compute_share: Decimal | str | int | None = None,
    isolation: str = Isolation.HARD,
    partition_profile: str = "",
    max_instances: int | None = None,
    slug: str = "",
    description: str = "",
) -> ComputeTemplate:
    """Create a custom compute template (validated against its card; audited)."""
    template = compute_template_build(
        device_model=device_model,
        name=name,
        memory_mib=memory_mib,
        compute_share=compute_share,
        isolation=isolation,
        partition_profile=partition_profile,
        max_instances=max_instances,
        slug=slug,
        description=description,
    )
    template.created_by = _actor_user(actor)
    _save_template(template)
    change_record_create(
        actor=actor, action="compute_template.create", obj=template, after=snapshot(template, _AUDIT_FIELDS)
    )
    return template


@transaction.atomic
def compute_template_update(*, template: ComputeTemplate, actor, **changes: Any) -> ComputeTemplate:
    """Change a custom template. Built-in and retired templates are read-only (Conflict).

    ``changes`` may hold any of TEMPLATE_FIELDS; the others keep their values, and the whole template
    is validated again against its (possibly new) card.
    """
    unknown = set(changes) - _EDITABLE_FIELDS
    if unknown:
        raise ValidationFailed(
            _("these fields cannot be changed: %(fields)s") % {"fields": ", ".join(sorted(unknown))},
            details={name: ["cannot be changed"] for name in sorted(unknown)},
        )
    locked = ComputeTemplate.objects.select_for_update().select_related("device_model").get(pk=template.pk)
    if locked.is_builtin:
        raise Conflict(
            _(
                "%(name)s is a built-in template generated from the catalog and is read-only; "
                "copy it into a new template to change it"
            )
            % {"name": localize(locked.name)},
            code="read_only",
        )
    if locked.is_retired:
        raise Conflict(
            _("%(name)s is retired; retired templates are read-only") % {"name": localize(locked.name)},
            code="read_only",
        )
    before = snapshot(locked, _AUDIT_FIELDS)
    values = {name: getattr(locked, name) for name in TEMPLATE_FIELDS}
    values.update(changes)
    if (values["partition_profile"] or "") != locked.partition_profile or values[
        "device_model"
    ] != locked.device_model:
        # A new profile (or card) fixes these again unless the change gives them.
        for name in ("memory_mib", "compute_share", "max_instances"):
            if name not in changes and values["partition_profile"]:
                values[name] = None
    compute_template_build(**values, instance=locked)
    after = snapshot(locked, _AUDIT_FIELDS)
    changed = [name for name in _AUDIT_FIELDS if before[name] != after[name]]
    if not changed:
        return locked
    _save_template(locked)
    change_record_create(
        actor=actor,
        action="compute_template.update",
        obj=locked,
        before={name: before[name] for name in changed},
        after={name: after[name] for name in changed},
    )
    return locked


@transaction.atomic
def compute_template_retire(*, template: ComputeTemplate, actor, reason: str = "") -> ComputeTemplate:
    """Retire a template: it stays (allocations and bills may point at it) but is no longer offered."""
    locked = ComputeTemplate.objects.select_for_update().get(pk=template.pk)
    if locked.is_retired:
        return locked
    locked.is_retired = True
    locked.save(update_fields=["is_retired", "updated_at"])
    change_record_create(
        actor=actor,
        action="compute_template.retire",
        obj=locked,
        before={"is_retired": False},
        after={"is_retired": True},
        message=(reason or "").strip(),
    )
    return locked


@transaction.atomic
def compute_template_delete(*, template: ComputeTemplate, actor) -> None:
    """Delete a custom template nothing refers to; otherwise Conflict (retire it instead)."""
    locked = ComputeTemplate.objects.select_for_update().get(pk=template.pk)
    if locked.is_builtin:
        raise Conflict(
            _("%(name)s is a built-in template generated from the catalog; retire it instead")
            % {"name": localize(locked.name)},
            code="read_only",
        )
    record = snapshot(locked, _AUDIT_FIELDS)
    pk = locked.pk
    try:
        with transaction.atomic():
            locked.delete()
    except ProtectedError:
        raise Conflict(
            _("%(name)s is in use; retire it instead of deleting it") % {"name": localize(locked.name)},
            code="in_use",
        )
    locked.pk = pk  # the audit record names the deleted row
    change_record_create(actor=actor, action="compute_template.delete", obj=locked, before=record)


# Names and descriptions of the built-in templates: stored, shown in the reader's language
# (ComputeTemplate.label, ``|localized``; apps.core.stored_text).
WHOLE_NAME = stored("%(model)s · whole card")
WHOLE_DESCRIPTION = stored("Built-in: the whole card, hard-isolated.")
PROFILE_DESCRIPTION = stored("Built-in from the catalog's %(label)s profile %(profile)s.")
SHARED_NAMES = {
    "half": stored("%(model)s · half (shared)"),
    "quarter": stored("%(model)s · quarter (shared)"),
}
SHARED_DESCRIPTION = stored(
    "Built-in: a soft slice, 1/%(divisor)s of the card: %(gib)s GiB of memory "
    "(rounded down to whole GiB) and %(share)s %% of the compute, shared."
)


def _builtin_specs(model: DeviceModel) -> tuple[list[dict[str, Any]], list[str]]:
    """The built-in templates of one card model (field values by slug) and why some were skipped."""
    specs: list[dict[str, Any]] = []
    skipped: list[str] = []
    physical = model.memory_mib
    if not physical:
        skipped.append(f"{model.name}: memory unknown in the catalog, no template can be checked against it")
        return specs, skipped
    whole = whole_gib_mib(physical)
    specs.append(
        {
            "slug": f"{model.slug}-whole",
            "name": WHOLE_NAME % {"model": model.name},
            "memory_mib": whole,
            "compute_share": Decimal("100.00"),
            "isolation": Isolation.HARD,
            "partition_profile": "",
            "max_instances": 1,
            "description": WHOLE_DESCRIPTION,
        }
    )
    for profile in partition_profiles(model):
        if isinstance(profile, ProfileError):
            skipped.append(f"{model.name}: {profile}")
            continue
        if profile.memory_mib is None:
            skipped.append(f"{model.name}: vNPU template {profile.name} has no memory size in the catalog")
            continue
        if profile.memory_mib > physical:
            skipped.append(f"{model.name}: profile {profile.name} is larger than the card's memory")
            continue
        label = {"mig": "MIG", "vnpu": "vNPU"}.get(profile.kind, "AMD partition")
        specs.append(
            {
                "slug": slugify(
                    f"{model.slug}-{profile.kind}-{profile.name.replace('.', '-').replace('+', '-')}"
                ),
                "name": f"{model.name} · {label} {profile.name}",
                "memory_mib": profile.memory_mib,
                "compute_share": profile.compute_share,
                "isolation": Isolation.HARD,
                "partition_profile": profile.name,
                "max_instances": profile.default_instances,
                "description": PROFILE_DESCRIPTION % {"label": label, "profile": profile.name},
            }
        )
    for divisor, word in ((2, "half"), (4, "quarter")):
        memory = whole_gib_mib(physical, divisor)
        if memory < MIB_PER_GIB:
            skipped.append(f"{model.name}: a {word} of the card is less than 1 GiB")
            continue
        specs.append(
            {
                "slug": f"{model.slug}-{word}-shared",
                "name": SHARED_NAMES[word] % {"model": model.name},
                "memory_mib": memory,
                "compute_share": share_percent(1, divisor),
                "isolation": Isolation.SHARED,
                "partition_profile": "",
                "max_instances": divisor,
                "description": SHARED_DESCRIPTION
                % {"divisor": divisor, "gib": memory // MIB_PER_GIB, "share": share_percent(1, divisor)},
            }
        )
    return specs, skipped


def _sync_save(template: ComputeTemplate, *, taken: str) -> str:
    """Clean and save a built-in template for the sync: "" when saved, else why it was skipped."""
    try:
        template.full_clean(validate_unique=False, validate_constraints=False)
        with transaction.atomic():
            template.save()
    except DjangoValidationError as exc:
        return _first_message(validation_details(exc))
    except IntegrityError:
        return taken
    return ""


@transaction.atomic
def compute_template_sync_builtin(*, actor) -> dict[str, Any]:
    """Create or refresh the built-in templates from the catalog, for every device model. Idempotent.

    Per model with known memory: the whole card (100 %, hard, 1 per card); each MIG profile and each
    vNPU template with a memory size (hard; numbers from apps/catalog/partitions.py); a half and a
    quarter as soft slices (shared, 50 % / 25 %, memory / 2 and / 4 rounded down to whole GiB,
    2 / 4 per card). Rows are keyed by slug; a custom template holding a built-in slug is left alone
    and reported. Built-ins the catalog no longer yields are left alone (something may use them).

    Returns {"created", "updated", "unchanged", "skipped": [reasons]}.
    """
    counts: dict[str, Any] = {"created": 0, "updated": 0, "unchanged": 0, "skipped": []}
    models = list(DeviceModel.objects.order_by("vendor", "name"))
    planned: list[tuple[DeviceModel, dict[str, Any]]] = []
    for model in models:
        specs, skipped = _builtin_specs(model)
        counts["skipped"].extend(skipped)
        planned.extend((model, spec) for spec in specs)
    existing = {
        t.slug: t
        for t in ComputeTemplate.objects.select_for_update().filter(
            slug__in=[spec["slug"] for _m, spec in planned]
        )
    }
    fields = [name for name in TEMPLATE_FIELDS if name not in ("device_model", "slug")]
    for model, spec in planned:
        template = existing.get(spec["slug"])
        if template is None:
            template = ComputeTemplate(device_model=model, is_builtin=True, **spec)
            taken = "the name or slug is taken by another template"
        elif not template.is_builtin or template.device_model_id != model.pk:
            counts["skipped"].append(f"{spec['name']}: slug {spec['slug']} is taken by a custom template")
            continue
        else:
            taken = "the name is taken by another template"
        outcome, problem = synced_upsert(
            template,
            spec,
            fields=fields,
            save=lambda t, taken=taken: _sync_save(t, taken=taken),
            actor=actor,
            action="compute_template.sync",
            created_fields=_AUDIT_FIELDS,
            created_message="built-in template created from the catalog",
            updated_message="built-in template updated from the catalog",
        )
        if outcome == "skipped":
            counts["skipped"].append(f"{spec['name']}: {problem}")
        else:
            counts[outcome] += 1
    return counts


# ------------------------------------------------------------------ device request templates

_REQUEST_AUDIT_FIELDS = ["name", "api_version", "metadata", "spec", "warnings"]


def _spec_failed(error: request_spec.SpecError) -> ValidationFailed:
    details: dict[str, list[str]] = {}
    for path, message in error.errors:
        details.setdefault(path, []).append(message)
    return ValidationFailed(str(error), details=details)


def request_template_resolve(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Read each device group's model name against the catalog: (resolution per group, warnings)."""
    catalog = list(DeviceModel.objects.all())
    resolution: list[dict[str, Any]] = []
    warnings: list[str] = []
    for index, device in enumerate(spec.get("devices") or []):
        entry = selectors.request_model_resolve(
            device_type=device.get("type", ""), model_name=device.get("model"), models=catalog
        )
        entry["index"] = index
        resolution.append(entry)
        warning = selectors.request_model_warning(f"spec.devices[{index}].model", entry)
        if warning:
            warnings.append(warning)
    return resolution, warnings


def request_template_check(*, text: str | None = None, data: Any = None) -> request_spec.Document:
    """Parse (text) or take (data) a DeviceRequestTemplate document and validate it; no writes.

    ParseFailed names the line of a YAML syntax error; ValidationFailed lists each problem by path
    ("spec.devices[1].count: must be a positive integer").
    """
    if text is not None:
        try:
            data = request_spec.document_parse(text)
        except request_spec.DocumentSyntaxError as exc:
            details = {"line": exc.line, "column": exc.column} if exc.line is not None else None
            raise ParseFailed(exc.message, details=details)
    try:
        return request_spec.document_validate(data)
    except request_spec.SpecError as exc:
        raise _spec_failed(exc)


@transaction.atomic
def request_template_import(
    *, text: str | None = None, data: Any = None, actor
) -> tuple[DeviceRequestTemplate, list[str]]:
    """Import a DeviceRequestTemplate (YAML text, or already-parsed data) -> (template, warnings).

    Upsert by metadata.name: the same name and spec again changes nothing (no audit record); a new
    spec for an existing name replaces it (audited with before/after). Model names are kept as
    written; how each was read against the catalog is stored in ``resolution`` and every name that
    is not exactly one catalog model produces a warning. The template carries ``import_outcome``
    ("created", "updated" or "unchanged") for the caller.
    """
    document = request_template_check(text=text, data=data)
    resolution, model_warnings = request_template_resolve(document.spec)
    warnings = [*document.warnings, *model_warnings]
    values = {
        "api_version": document.api_version,
        "metadata": document.metadata,
        "spec": document.spec,
        "resolution": resolution,
        "warnings": warnings,
    }
    template = DeviceRequestTemplate.objects.select_for_update().filter(name=document.name).first()
    if template is None:
        template = DeviceRequestTemplate(
            name=document.name, slug=slugify(document.name)[:253], created_by=_actor_user(actor), **values
        )
        validate(template, what="request template", validate_unique=False)
        _save_or_conflict(
            template,
            _("a request template named %(name)r (or with the same slug) already exists")
            % {"name": document.name},
            {"metadata.name": ["already taken"]},
        )
        change_record_create(
            actor=actor,
            action="request_template.import",
            obj=template,
            after=snapshot(template, _REQUEST_AUDIT_FIELDS),
            message="created",
        )
        template.import_outcome = "created"
        return template, warnings

    same = (
        template.api_version == document.api_version
        and template.spec == document.spec
        and template.metadata == document.metadata
    )
    if same and template.resolution == resolution and template.warnings == warnings:
        template.import_outcome = "unchanged"
        return template, warnings
    before = snapshot(template, _REQUEST_AUDIT_FIELDS)
    for name, value in values.items():
        setattr(template, name, value)
    template.full_clean(validate_unique=False)
    template.save()
    change_record_create(
        actor=actor,
        action="request_template.import",
        obj=template,
        before=before,
        after=snapshot(template, _REQUEST_AUDIT_FIELDS),
        message="updated" if not same else "model resolution refreshed from the catalog",
    )
    template.import_outcome = "updated"
    return template, warnings


def request_template_document(template: DeviceRequestTemplate) -> dict[str, Any]:
    return request_spec.document_dict(
        api_version=template.api_version, name=template.name, metadata=template.metadata, spec=template.spec
    )


def request_template_export(template: DeviceRequestTemplate, *, fmt: str = "yaml") -> str:
    """The template as a document in the seed's shape (YAML by default, or JSON): import-able again."""
    document = request_template_document(template)
    return request_spec.json_dump(document) if fmt == "json" else request_spec.yaml_dump(document)


@transaction.atomic
def request_template_delete(*, template: DeviceRequestTemplate, actor) -> None:
    """Delete a request template (nothing refers to one yet; jobs will copy what they use)."""
    record = snapshot(template, _REQUEST_AUDIT_FIELDS)
    pk = template.pk
    try:
        with transaction.atomic():
            template.delete()
    except ProtectedError:
        raise Conflict(_("%(name)s is in use") % {"name": template.name}, code="in_use")
    template.pk = pk
    change_record_create(actor=actor, action="request_template.delete", obj=template, before=record)
