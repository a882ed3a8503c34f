"""Audit records written by services (never by signals), so changes made by workers are audited too."""

from __future__ import annotations

from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import models

from apps.core.models import ChangeRecord


def current_task_id() -> str:
    try:
        from celery import current_task
    except ImportError:  # pragma: no cover - celery is a hard dependency
        return ""
    request = getattr(current_task, "request", None)
    return (getattr(request, "id", None) or "") if current_task else ""


def actor_fields(actor: Any) -> dict[str, Any]:
    """Split an actor (a user, or a label such as "worker" / "agent:prod") into record fields."""
    if actor is None:
        return {"actor": None, "actor_label": "system"}
    if isinstance(actor, str):
        return {"actor": None, "actor_label": actor}
    from django.contrib.auth import get_user_model

    if isinstance(actor, get_user_model()):
        return {"actor": actor, "actor_label": actor.get_username()}
    # Node agents and other non-user principals are recorded by label only.
    return {"actor": None, "actor_label": str(actor)[:150]}


def change_record_create(
    *,
    actor: Any,
    action: str,
    obj: models.Model,
    before: dict | None = None,
    after: dict | None = None,
    message: str = "",
) -> ChangeRecord:
    return ChangeRecord.objects.create(
        **actor_fields(actor),
        action=action,
        content_type=ContentType.objects.get_for_model(obj, for_concrete_model=False),
        object_id=str(obj.pk),
        object_repr=str(obj)[:300],
        before=before,
        after=after,
        task_id=current_task_id(),
        message=message,
    )


def snapshot(obj: models.Model, fields: list[str]) -> dict[str, Any]:
    """A JSON-safe dict of selected fields (foreign keys by id) for before/after records."""
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(obj, name)
        if isinstance(value, models.Model):
            value = value.pk
        elif hasattr(value, "isoformat"):
            value = value.isoformat()
        elif value is not None and not isinstance(value, str | int | float | bool | list | dict):
            value = str(value)
        out[name] = value
    return out
