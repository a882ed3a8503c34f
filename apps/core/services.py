"""Writes every app shares: ``model_update``, the one way to change a row's fields with its audit.

HackSoft's ``model_update(instance, fields, data)`` (Django Styleguide, "Services":
https://github.com/HackSoftware/Django-Styleguide#services), with this project's audit: set the fields
that changed, validate the row the one way (``apps.core.validation.validate``: a failure is one
``ValidationFailed``, 400, and nothing is written), save only the changed fields, and write the
``ChangeRecord`` with their before and after. A service keeps its own rules (permissions, locks,
what may change); the set–validate–save–audit sequence is written here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from django.db import models

from apps.core.audit import change_record_create, snapshot
from apps.core.validation import validate

ModelT = TypeVar("ModelT", bound=models.Model)


def model_update(
    *,
    instance: ModelT,
    fields: Iterable[str],
    data: dict[str, Any],
    actor: Any,
    action: str,
    what: str,
    audit_fields: Sequence[str] | None = None,
    message: str = "",
    check: Callable[[ModelT], None] | None = None,
    record_unchanged: bool = False,
    **clean: Any,
) -> tuple[ModelT, bool]:
    """Update ``instance`` from ``data`` and audit it; returns ``(instance, changed)``.

    Each of ``fields`` that ``data`` holds and whose value differs is set. When any changed: the row
    is validated (``validate(instance, what=what, **clean)``; ``clean`` passes ``exclude`` /
    ``validate_unique`` / ``validate_constraints`` through), ``check(instance)`` runs (a rule beyond
    the model, which raises to refuse), only those fields are saved (with ``updated_at`` when the
    model keeps one) and one ChangeRecord ``action`` is written: the before/after of ``audit_fields``
    (default: the changed fields), with ``message``. Nothing changed: nothing is validated or saved,
    and no record is written unless ``record_unchanged`` (a service whose trail records every
    request)."""
    names = [name for name in fields if name in data]
    tracked = list(audit_fields) if audit_fields is not None else names
    before = snapshot(instance, tracked)
    changed = []
    for name in names:
        if getattr(instance, name) != data[name]:
            setattr(instance, name, data[name])
            changed.append(name)
    if changed:
        validate(instance, what=what, **clean)
        if check is not None:
            check(instance)
        concrete = {f.name for f in instance._meta.concrete_fields}
        instance.save(update_fields=[*changed, *(["updated_at"] if "updated_at" in concrete else [])])
    elif not record_unchanged:
        return instance, False
    after = snapshot(instance, tracked)
    if audit_fields is None:
        before, after = {n: before[n] for n in changed}, {n: after[n] for n in changed}
    change_record_create(
        actor=actor, action=action, obj=instance, before=before, after=after, message=message
    )
    return instance, bool(changed)
