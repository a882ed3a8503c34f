"""Device request templates: documents naming devices by their attributes, checked, resolved against the
catalog, imported, exported and deleted (audited)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import ProtectedError
from django.utils.text import slugify
from django.utils.translation import gettext as _

from apps.catalog import request_spec, selectors
from apps.catalog.models import (
    DeviceModel,
    DeviceRequestTemplate,
)
from apps.catalog.services.device_models import _actor_user, _save_or_conflict
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict, ParseFailed, ValidationFailed
from apps.core.services import model_update
from apps.core.validation import validate

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
    model_update(
        instance=template,
        fields=list(values),
        data=values,
        actor=actor,
        action="request_template.import",
        what="request template",
        audit_fields=_REQUEST_AUDIT_FIELDS,
        message="updated" if not same else "model resolution refreshed from the catalog",
        validate_unique=False,
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
