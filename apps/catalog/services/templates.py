"""Compute templates (算力模板): building one from a model and a partition profile or a share, checking a MIG
layout, and creating, changing, retiring and deleting templates (audited)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import ProtectedError
from django.utils.text import slugify
from django.utils.translation import gettext as _

from apps.catalog.mig import carve, layout_problem_text, model_geometry
from apps.catalog.models import (
    ComputeTemplate,
    DeviceModel,
    Isolation,
)
from apps.catalog.partitions import (
    MIG,
    PartitionProfile,
    ProfileError,
    partition_profile,
)
from apps.catalog.services.device_models import _actor_user, _save_or_conflict
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict, ValidationFailed
from apps.core.stored_text import localize
from apps.core.validation import validate, validation_details, validation_message

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
        validate(template, what="compute template", validate_constraints=False)
    except ValidationFailed as exc:
        errors = exc.details
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
