"""Writes for tenancy: departments, projects, memberships, tokens."""

from __future__ import annotations

import zoneinfo
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _

from apps.accounts.models import ApiToken, Department, Membership, Project, UserPreference
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import ValidationFailed
from apps.core.services import model_update
from apps.core.validation import validate_and_save


@transaction.atomic
def department_create(*, name: str, slug: str, description: str = "", actor) -> Department:
    department = validate_and_save(
        Department(name=name, slug=slug, description=description), what=_("department")
    )
    change_record_create(
        actor=actor, action="department.create", obj=department, after=snapshot(department, ["name", "slug"])
    )
    return department


@transaction.atomic
def project_create(
    *,
    department: Department,
    name: str,
    slug: str,
    namespace: str,
    description: str = "",
    is_active: bool = True,
    actor,
) -> Project:
    project = Project(
        department=department,
        name=name,
        slug=slug,
        namespace=namespace,
        description=description,
        is_active=is_active,
    )
    validate_and_save(project, what=_("project"))
    change_record_create(
        actor=actor,
        action="project.create",
        obj=project,
        after=snapshot(project, ["department", "name", "slug", "namespace", "is_active"]),
    )
    return project


@transaction.atomic
def membership_set(*, user, project: Project, role: str, actor) -> Membership:
    membership, created = Membership.objects.select_for_update().get_or_create(
        user=user, project=project, defaults={"role": role}
    )
    if created:
        change_record_create(actor=actor, action="membership.set", obj=membership, after={"role": role})
        return membership
    # A repeated set is recorded too (before = after): the trail keeps every request.
    membership, _changed = model_update(
        instance=membership,
        fields=["role"],
        data={"role": role},
        actor=actor,
        action="membership.set",
        what=_("membership"),
        audit_fields=["role"],
        record_unchanged=True,
    )
    return membership


@transaction.atomic
def api_token_create(*, user, name: str, expires_at: datetime | None = None, actor) -> tuple[ApiToken, str]:
    """Create a token and return it with its key; the key is not stored and cannot be shown again.

    Only a signed-in person makes tokens (pages, admin; the API refuses a request authenticated by a
    token: apps.accounts.api.permissions.MintsNoTokens), so a token never begets another one."""
    key = ApiToken.generate_key("sc")
    token = ApiToken(
        user=user, name=name, prefix=key[:10], key_hash=ApiToken.hash_key(key), expires_at=expires_at
    )
    validate_and_save(token, what=_("API token"))
    change_record_create(actor=actor, action="api_token.create", obj=token, after={"name": name})
    return token, key


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor) -> ApiToken:
    if token.revoked:
        return token
    ApiToken.objects.filter(pk=token.pk).update(revoked=True)
    token.revoked = True
    change_record_create(
        actor=actor, action="api_token.revoke", obj=token, before={"revoked": False}, after={"revoked": True}
    )
    return token


@transaction.atomic
def preference_set(*, user, language: str = "", time_zone: str = "", actor) -> UserPreference:
    """Store the user's language and time zone (blank = the platform's); 400 for an unknown one."""
    errors = {}
    if language and language not in dict(settings.LANGUAGES):
        errors["language"] = [_("Choose one of the platform's languages.")]
    if time_zone and time_zone not in zoneinfo.available_timezones():
        errors["time_zone"] = [
            _("%(zone)s is not an IANA time zone (e.g. Asia/Shanghai).") % {"zone": time_zone[:64]}
        ]
    if errors:
        raise ValidationFailed(next(iter(errors.values()))[0], details=errors)
    pref, _created = UserPreference.objects.update_or_create(
        user=user, defaults={"language": language, "time_zone": time_zone}
    )
    change_record_create(
        actor=actor, action="preference.set", obj=pref, after={"language": language, "time_zone": time_zone}
    )
    return pref
