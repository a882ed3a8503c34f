"""API permissions. Node agents authenticate but may only post node reports."""

from rest_framework.permissions import SAFE_METHODS, BasePermission


def is_agent(user) -> bool:
    return bool(getattr(user, "is_agent", False))


class IsUser(BasePermission):
    """An authenticated, active human user (not a node agent)."""

    message = "Authentication as a user is required."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and not is_agent(user))


class IsStaffOrReadOnly(IsUser):
    """Any user may read; only platform staff may write."""

    message = "Only platform staff may change this."

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        return request.method in SAFE_METHODS or bool(request.user.is_staff)


class IsStaff(IsUser):
    message = "Only platform staff may do this."

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and bool(request.user.is_staff)


class IsAgentOrStaff(BasePermission):
    """Node reports: the cluster's agent token, or a staff user."""

    message = "Only a node agent token or platform staff may post node reports."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return is_agent(user) or bool(user.is_staff)
