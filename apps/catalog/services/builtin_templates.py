"""The built-in compute templates of every catalog model (the whole card, each partition profile, shared
halves and quarters), kept in step with the catalog by ``compute_template_sync_builtin``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils.text import slugify

from apps.catalog.models import (
    ComputeTemplate,
    DeviceModel,
    Isolation,
)
from apps.catalog.partitions import (
    MIB_PER_GIB,
    ProfileError,
    partition_profiles,
    share_percent,
    whole_gib_mib,
)
from apps.catalog.services.templates import _AUDIT_FIELDS, TEMPLATE_FIELDS, _first_message
from apps.catalog.upsert import synced_upsert
from apps.core.errors import ValidationFailed
from apps.core.stored_text import stored
from apps.core.validation import validate

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
        validate(template, what="compute template", validate_unique=False, validate_constraints=False)
        with transaction.atomic():
            template.save()
    except ValidationFailed as exc:
        return _first_message(exc.details)
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
