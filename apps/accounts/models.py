"""Tenancy: Department → Project → Membership, and API tokens."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.accounts.expiry import expiry_problem
from apps.core.models import BaseModel

# A Kubernetes namespace is a DNS-1123 label.
namespace_validator = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    _(
        "Use a DNS-1123 label: lower-case letters, digits and '-', 1-63 characters, alphanumeric at both ends."
    ),
)


class Department(BaseModel):
    name = models.CharField(_("name"), max_length=100, unique=True)
    slug = models.SlugField(unique=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("department")

    def __str__(self) -> str:
        return self.name


class Project(BaseModel):
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="projects")
    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(unique=True)
    namespace = models.CharField(
        _("Kubernetes namespace"), max_length=63, unique=True, validators=[namespace_validator]
    )
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects", blank=True
    )

    class Meta:
        ordering = ["department__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["department", "name"], name="accounts_project_unique_name"),
        ]
        verbose_name = _("project")

    def __str__(self) -> str:
        return self.name


class Membership(BaseModel):
    class Role(models.TextChoices):
        VIEWER = "viewer", _("viewer")
        MEMBER = "member", _("member")
        ADMIN = "admin", _("admin")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        ordering = ["project__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="accounts_membership_unique"),
            models.CheckConstraint(
                condition=models.Q(role__in=["viewer", "member", "admin"]),
                name="accounts_membership_role_valid",
            ),
        ]
        verbose_name = _("membership")

    def __str__(self) -> str:
        return f"{self.user} @ {self.project} ({self.role})"


def _hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(BaseModel):
    """A user's API token. Only a SHA-256 of the key is stored; the key is shown once at creation."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("API token")

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def clean(self) -> None:
        super().clean()
        # A new token's expiry (page, API and admin alike); an old token keeps the one it was made with.
        if self._state.adding and self.expires_at is not None:
            problem = expiry_problem(self.expires_at)
            if problem is not None:
                raise ValidationError({"expires_at": problem})

    @staticmethod
    def generate_key(prefix: str = "sc") -> str:
        return f"{prefix}_{secrets.token_urlsafe(32)}"

    @staticmethod
    def hash_key(key: str) -> str:
        return _hash_key(key)


class UserPreference(models.Model):
    """A user's own language and time zone (blank: the platform's). Applied to every page and chart by
    ``apps.accounts.middleware.UserPreferenceMiddleware``."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference")
    language = models.CharField(_("language"), max_length=10, blank=True, choices=settings.LANGUAGES)
    time_zone = models.CharField(_("time zone"), max_length=64, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("user preference")

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language or '-'} {self.time_zone or '-'}"
