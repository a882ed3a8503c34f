"""Model validation for services: ``full_clean()`` whose failure is one ``ValidationFailed`` (400).

Every service validates a row before it saves it (CONVENTIONS "Where logic lives"). A Django
``ValidationError`` that escaped to the API became the handler's bare "Invalid input."; the copies of
this helper each app once kept worded their messages five ways. Here it is one shape:

    message: "<what> is invalid: <field>: <messages>; <field>: <messages>"   (non-field messages bare)
    details: {"<field>": ["<message>", …], "__all__": [...]}                 (Django's message_dict)

``details`` keeps the field names the model reports, so API clients and page forms that map them
back to inputs keep working (Django: "Validating objects", ref/models/instances/#validating-objects).
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.utils.translation import gettext as _

from apps.core.errors import ValidationFailed

ModelT = TypeVar("ModelT", bound=models.Model)

# A ValidationError raised with a plain list (not per field) has no field names: its messages go here.
LIST_ERRORS_KEY = "non_field_errors"


def validation_details(error: DjangoValidationError) -> dict[str, list[str]]:
    """``{field: [message, …]}`` of a Django ValidationError (``__all__`` for a model's ``clean()``,
    ``non_field_errors`` when the error named no field at all)."""
    if hasattr(error, "error_dict"):
        return {field: [str(m) for e in errs for m in e.messages] for field, errs in error.error_dict.items()}
    return {LIST_ERRORS_KEY: [str(m) for m in error.messages]}


def validation_message(what: str, details: dict[str, list[str]]) -> str:
    """The one message shape: ``"<what> is invalid: <field>: <messages>; …"``."""
    parts = []
    for field, messages in details.items():
        text = " ".join(str(m) for m in messages)
        parts.append(text if field in (NON_FIELD_ERRORS, LIST_ERRORS_KEY) else f"{field}: {text}")
    return _("%(what)s is invalid: %(errors)s") % {"what": what, "errors": "; ".join(parts)}


def validation_failed(error: DjangoValidationError, *, what: str) -> ValidationFailed:
    """The ``ValidationFailed`` for a Django ValidationError about ``what``."""
    details = validation_details(error)
    return ValidationFailed(validation_message(what, details), details=details)


def validate(obj: models.Model, *, what: str, exclude: list[str] | None = None, **clean: Any) -> None:
    """``obj.full_clean(exclude=…, **clean)``; a failure raises ``ValidationFailed`` in the shape above.
    ``clean`` passes ``validate_unique`` / ``validate_constraints`` through."""
    try:
        obj.full_clean(exclude=exclude, **clean)
    except DjangoValidationError as exc:
        raise validation_failed(exc, what=what) from None


def validate_and_save(
    obj: ModelT,
    *,
    what: str,
    exclude: list[str] | None = None,
    update_fields: list[str] | None = None,
    **clean: Any,
) -> ModelT:
    """Validate ``obj`` (see ``validate``) and save it; nothing is written when it is invalid."""
    validate(obj, what=what, exclude=exclude, **clean)
    obj.save(update_fields=update_fields)
    return obj
