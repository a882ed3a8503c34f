"""The helpers every app shares from apps.core: validation-and-save, the read-only admin, the per-row
admin action runner and the staff checks for services and pages."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.messages import get_messages
from django.contrib.messages.storage.fallback import FallbackStorage
from django.test import RequestFactory

from apps.accounts.models import Department
from apps.core import errors
from apps.core.admin import ReadOnlyAdminMixin, run_each
from apps.core.audit import change_record_create
from apps.core.models import ChangeRecord
from apps.core.permissions import require_staff, user_is_staff
from apps.core.validation import validate, validate_and_save, validation_message

pytestmark = pytest.mark.django_db


# ------------------------------------------------------------------ validate / validate_and_save


def test_an_invalid_row_is_one_validation_failed_naming_each_field_and_nothing_is_written():
    Department.objects.create(name="Vision", slug="vision")
    row = Department(name="", slug="vision")
    with pytest.raises(errors.ValidationFailed) as info:
        validate_and_save(row, what="department")
    error = info.value
    assert error.status_code == 400 and error.code == "invalid"
    # The details keep the model's field names (API clients and forms map them back to inputs).
    assert set(error.details) == {"name", "slug"}
    assert error.message.startswith("department is invalid: ")
    assert "name: This field cannot be blank." in error.message
    assert "slug: Department with this Slug already exists." in error.message
    assert Department.objects.count() == 1 and row.pk is None


def test_messages_without_a_field_are_shown_bare_and_exclude_skips_fields():
    assert validation_message("quota", {"__all__": ["Start is after end."], "name": ["Too long."]}) == (
        "quota is invalid: Start is after end.; name: Too long."
    )
    record = ChangeRecord(action="x" * 200, object_repr="r")  # action: at most 80 characters
    with pytest.raises(errors.ValidationFailed) as info:
        validate(record, what="change record", exclude=["content_type", "object_id"])
    assert list(info.value.details) == ["action"]


def test_validate_and_save_saves_a_valid_row_and_honours_update_fields():
    department = validate_and_save(Department(name="Speech", slug="speech"), what="department")
    assert Department.objects.get(slug="speech").pk == department.pk
    department.name, department.description = "Speech lab", "not saved"
    validate_and_save(department, what="department", update_fields=["name", "updated_at"])
    department.refresh_from_db()
    assert (department.name, department.description) == ("Speech lab", "")


# ------------------------------------------------------------------ admin helpers


def _request(user):
    request = RequestFactory().post("/admin/")
    request.user = user
    request.session = {}
    request._messages = FallbackStorage(request)
    return request


def test_run_each_reports_each_refusal_with_its_row_and_the_successes_together(staff_user):
    rows = [Department.objects.create(name=n, slug=n) for n in ("a", "b", "c")]
    modeladmin = admin.site._registry[ChangeRecord]
    request = _request(staff_user)
    touched = []

    def call(department):
        if department.slug == "b":
            raise errors.Conflict("b is busy")
        touched.append(department.slug)

    assert run_each(modeladmin, request, rows, call, "Done") == 2
    assert touched == ["a", "c"]
    texts = [(m.level_tag, str(m)) for m in get_messages(request)]
    assert texts == [("error", "b: b is busy"), ("success", "Done: 2")]


def test_run_each_lets_an_unexpected_error_through(staff_user):
    modeladmin = admin.site._registry[ChangeRecord]
    row = Department.objects.create(name="a", slug="a")
    with pytest.raises(ZeroDivisionError):
        run_each(modeladmin, _request(staff_user), [row], lambda obj: 1 / 0, "Done")


def test_read_only_admins_refuse_add_change_and_delete_even_to_a_superuser(staff_user):
    request = _request(staff_user)
    for model_admin in admin.site._registry.values():
        if isinstance(model_admin, ReadOnlyAdminMixin):
            assert not model_admin.has_add_permission(request)
            assert not model_admin.has_change_permission(request, None)
            assert not model_admin.has_delete_permission(request, None)
            assert model_admin.has_view_permission(request, None)
    assert isinstance(admin.site._registry[ChangeRecord], ReadOnlyAdminMixin)


def test_the_change_record_admin_answers_403_to_a_delete(client, staff_user):
    record = change_record_create(
        actor="test", action="test", obj=Department.objects.create(name="a", slug="a")
    )
    client.force_login(staff_user)
    assert client.get(f"/admin/core/changerecord/{record.pk}/change/").status_code == 200
    assert client.post(f"/admin/core/changerecord/{record.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ChangeRecord.objects.filter(pk=record.pk).exists()


# ------------------------------------------------------------------ staff checks


def test_require_staff_lets_staff_and_internal_labels_through_and_refuses_everyone_else(make_user):
    require_staff(make_user(staff=True))
    require_staff("demo-loader")  # a label is an internal caller (worker, command)
    for actor in (make_user(), None):
        with pytest.raises(errors.PermissionDenied) as info:
            require_staff(actor, message="Only staff may.")
        assert info.value.status_code == 403 and info.value.message == "Only staff may."
    assert not user_is_staff(None)


def test_migration_plans_refuse_a_missing_actor(db):
    """Regression: migration's own copy let ``actor=None`` change plans; the shared check does not."""
    from apps.migration import services

    with pytest.raises(errors.PermissionDenied):
        services.plan_create(actor=None, name="nobody's plan")


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("/catalog/templates/new/", 403),  # catalog editor: 403 as before
        ("/rollout/waves/", 403),
        ("/billing/console/", 404),  # the billing console is hidden from non-staff
    ],
)
def test_staff_pages_send_anonymous_users_to_sign_in_and_refuse_other_users(
    client, make_user, staff_user, url, refused
):
    response = client.get(url)
    assert response.status_code == 302 and "/login" in response["Location"]
    client.force_login(make_user())
    assert client.get(url).status_code == refused
    client.force_login(staff_user)
    assert client.get(url).status_code == 200
