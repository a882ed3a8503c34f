"""model_update (apps/core/services.py): the one set–validate–save–audit of a row's fields, and the one
way to validate before saving (apps.core.validation)."""

from __future__ import annotations

import ast
from pathlib import Path
from unittest import mock

import pytest

from apps.accounts.models import Department
from apps.core.errors import ValidationFailed
from apps.core.models import ChangeRecord
from apps.core.services import model_update

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def _department() -> Department:
    return Department.objects.create(name="Research", slug="research", description="first")


def _update(department, **kwargs):
    return model_update(
        instance=department, actor="ops", action="department.update", what="department", **kwargs
    )


def _records(department):
    return ChangeRecord.objects.filter(object_id=str(department.pk), action="department.update")


def test_only_the_changed_fields_are_saved_and_audited():
    department = _department()
    with mock.patch.object(Department, "save", autospec=True, side_effect=Department.save) as save:
        department, changed = model_update(
            instance=department,
            fields=["name", "description"],
            data={"name": "Research", "description": "second", "slug": "ignored"},
            actor="ops",
            action="department.update",
            what="department",
        )
    assert changed and save.call_args.kwargs == {"update_fields": ["description", "updated_at"]}
    department.refresh_from_db()
    assert (department.slug, department.description) == ("research", "second")
    record = _records(department).get()
    assert (record.actor_label, record.before, record.after) == (
        "ops",
        {"description": "first"},
        {"description": "second"},
    )


def test_nothing_changed_writes_nothing_unless_every_request_is_recorded():
    department = _department()
    kwargs = dict(fields=["name"], data={"name": "Research"}, actor="ops", action="department.update")
    assert model_update(instance=department, what="department", **kwargs) == (department, False)
    assert not _records(department).exists()
    model_update(
        instance=department, what="department", audit_fields=["name"], record_unchanged=True, **kwargs
    )
    assert _records(department).get().before == {"name": "Research"} == _records(department).get().after


def test_an_invalid_row_is_refused_in_the_one_shape_and_nothing_is_written():
    department = _department()
    with pytest.raises(ValidationFailed) as refused:
        _update(department, fields=["slug"], data={"slug": "not a slug!"})
    assert refused.value.message.startswith("department is invalid: slug:")
    department.refresh_from_db()
    assert department.slug == "research" and not _records(department).exists()


def test_a_check_beyond_the_model_refuses_before_the_save():
    department = _department()

    def no_renames(row):
        raise ValidationFailed("no renames today")

    with pytest.raises(ValidationFailed):
        _update(department, fields=["name"], data={"name": "Renamed"}, check=no_renames)
    department.refresh_from_db()
    assert department.name == "Research"


def test_services_validate_through_apps_core_validation_not_a_bare_full_clean():
    """ "Validate before save" has one path: ``apps.core.validation.validate`` (or ``validate_and_save``,
    ``model_update``), whose failure is one ValidationFailed; a bare ``full_clean()`` raised Django's
    ValidationError, shown by the API as a bare "Invalid input.". Every app keeps to it."""
    found = []
    for path in sorted((ROOT / "apps").rglob("*.py")):
        if path.name == "validation.py" or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "full_clean":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
