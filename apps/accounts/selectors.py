"""Reads scoped by membership: every queryset a user sees goes through these."""

from __future__ import annotations

from django.db.models import QuerySet

from apps.accounts.models import Membership, Project
from apps.core.permissions import user_is_staff as is_platform_staff  # one staff test (apps.core)


def project_list(*, user) -> QuerySet[Project]:
    qs = Project.objects.select_related("department")
    if is_platform_staff(user):
        return qs
    if not getattr(user, "is_authenticated", False) or getattr(user, "is_agent", False):
        return qs.none()
    return qs.filter(memberships__user=user).distinct()


def user_project_ids(user) -> set[int]:
    if not getattr(user, "is_authenticated", False) or getattr(user, "is_agent", False):
        return set()
    return set(Membership.objects.filter(user=user).values_list("project_id", flat=True))


def user_role(user, project: Project) -> str | None:
    if is_platform_staff(user):
        return Membership.Role.ADMIN
    membership = Membership.objects.filter(user=user, project=project).only("role").first()
    return membership.role if membership else None
