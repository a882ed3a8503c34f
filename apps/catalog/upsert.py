"""One audited upsert for the catalog's seed syncs (device models, compute templates, workload
profiles): create a row the seed adds, update the fields that differ, leave an equal row alone, and
write a change record for each row created or updated."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.db.models import Model

from apps.core.audit import change_record_create, snapshot


def synced_upsert(
    obj: Model,
    values: Mapping[str, Any],
    *,
    fields: Iterable[str],
    save: Callable[[Model], str | None],
    actor,
    action: str,
    created_fields: list[str],
    created_message: str,
    updated_message: str,
) -> tuple[str, str]:
    """Save ``obj`` as the seed says: a new (unsaved) ``obj`` is saved as it is; a stored one gets
    ``values[name]`` for each of ``fields`` that differs and is saved only if one did.

    ``save(obj)`` saves and returns "" / None, or the reason it did not (then no change record).
    Returns ``(outcome, reason)``: outcome "created", "updated", "unchanged" or "skipped"."""
    creating = obj.pk is None
    before = None
    if creating:
        recorded = created_fields
    else:
        recorded = [name for name in fields if getattr(obj, name) != values[name]]
        if not recorded:
            return "unchanged", ""
        before = snapshot(obj, recorded)
        for name in recorded:
            setattr(obj, name, values[name])
    problem = save(obj)
    if problem:
        return "skipped", problem
    change_record_create(
        actor=actor,
        action=action,
        obj=obj,
        before=before,
        after=snapshot(obj, recorded),
        message=created_message if creating else updated_message,
    )
    return ("created" if creating else "updated"), ""
