"""Quotas (配额): guaranteed compute units per department or project and resource class.

Semantics (see ``apps.quotas.admission``): use up to ``guaranteed`` is never preempted by another
project; beyond it a project borrows idle lendable capacity (its department first, then platform-wide)
up to ``borrowing_limit``, and borrowed allocations are reclaimed when a lender needs its guarantee.
"""

from __future__ import annotations

from decimal import Decimal
from zoneinfo import available_timezones

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Department, Project
from apps.catalog.models import DeviceModel, Vendor
from apps.core.models import BaseModel
from apps.inventory.models import Pool
from apps.quotas import admission

DEFAULT_TIME_ZONE = "Asia/Shanghai"


class ResourceClass(models.TextChoices):
    ANY = "any", _("any accelerator")
    VENDOR = "vendor", _("vendor")
    DEVICE_MODEL = "device_model", _("device model")
    POOL = "pool", _("pool")


def parse_windows(windows) -> list[tuple[int, int]]:
    """[{"start": "22:00", "end": "08:00"}, …] → minute pairs; ValueError names the bad entry."""
    if not isinstance(windows, list):
        raise ValueError("give a list of {start, end} times of day")
    out = []
    for i, window in enumerate(windows):
        if not isinstance(window, dict) or set(window) != {"start", "end"}:
            raise ValueError(
                f"window {i + 1}: give exactly start and end, e.g. {{'start': '22:00', 'end': '08:00'}}"
            )
        try:
            start = admission.window_minutes(str(window["start"]))
            end = admission.window_minutes(str(window["end"]))
        except ValueError as exc:
            raise ValueError(f"window {i + 1}: {exc}") from None
        if start % 1440 == end % 1440:
            raise ValueError(f"window {i + 1}: start and end are the same time")
        out.append((start % 1440, end % 1440))
    return out


class Quota(BaseModel):
    department = models.ForeignKey(
        Department, null=True, blank=True, on_delete=models.PROTECT, related_name="quotas"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="quotas"
    )
    resource_class = models.CharField(
        _("resource class"), max_length=12, choices=ResourceClass.choices, default=ResourceClass.ANY
    )
    vendor = models.CharField(_("vendor"), max_length=20, choices=Vendor.choices, blank=True)
    device_model = models.ForeignKey(
        DeviceModel, null=True, blank=True, on_delete=models.PROTECT, related_name="quotas"
    )
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.PROTECT, related_name="quotas")
    guaranteed_cu = models.DecimalField(_("guaranteed (CU)"), max_digits=10, decimal_places=4)
    # None: may borrow without a bound (the idle capacity and the fleet bound it).
    borrowing_limit_cu = models.DecimalField(
        _("borrowing limit (CU)"), max_digits=10, decimal_places=4, null=True, blank=True
    )
    # None: all idle guarantee may be lent.
    lending_limit_cu = models.DecimalField(
        _("lending limit (CU)"), max_digits=10, decimal_places=4, null=True, blank=True
    )
    memory_limit_mib = models.PositiveIntegerField(_("device memory limit (MiB)"), null=True, blank=True)
    # While a window is open all idle guarantee is lendable, e.g. [{"start": "22:00", "end": "08:00"}].
    lending_windows = models.JSONField(_("lending windows"), default=list, blank=True)
    time_zone = models.CharField(_("time zone"), max_length=64, default=DEFAULT_TIME_ZONE)
    over_quota_weight = models.DecimalField(
        _("over-quota weight"), max_digits=6, decimal_places=2, default=Decimal("1.00")
    )

    class Meta:
        ordering = ["department__name", "project__name", "resource_class", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(department__isnull=False) & Q(project__isnull=True))
                | (Q(department__isnull=True) & Q(project__isnull=False)),
                name="quotas_quota_one_owner",
            ),
            models.CheckConstraint(
                condition=Q(resource_class__in=["any", "vendor", "device_model", "pool"]),
                name="quotas_quota_resource_class_valid",
            ),
            models.CheckConstraint(
                condition=(~Q(resource_class="vendor") | ~Q(vendor=""))
                & (~Q(resource_class="device_model") | Q(device_model__isnull=False))
                & (~Q(resource_class="pool") | Q(pool__isnull=False)),
                name="quotas_quota_class_target_set",
            ),
            models.CheckConstraint(
                condition=Q(guaranteed_cu__gte=0), name="quotas_quota_guarantee_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(borrowing_limit_cu__isnull=True) | Q(borrowing_limit_cu__gte=0),
                name="quotas_quota_borrowing_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(lending_limit_cu__isnull=True) | Q(lending_limit_cu__gte=0),
                name="quotas_quota_lending_nonnegative",
            ),
            models.CheckConstraint(condition=Q(over_quota_weight__gt=0), name="quotas_quota_weight_positive"),
            # One row per owner and class (portable: no NULLS NOT DISTINCT, which SQLite lacks).
            *[
                models.UniqueConstraint(
                    fields=[owner, *target],
                    condition=Q(**{f"{owner}__isnull": False}, resource_class=cls),
                    name=f"quotas_quota_unique_{owner}_{cls}",
                    violation_error_message=_(
                        "This owner already has a quota for this resource class; edit it."
                    ),
                )
                for owner in ("project", "department")
                for cls, target in (
                    ("any", []),
                    ("vendor", ["vendor"]),
                    ("device_model", ["device_model"]),
                    ("pool", ["pool"]),
                )
            ],
        ]
        verbose_name = _("quota")

    def __str__(self) -> str:
        owner = self.project.slug if self.project_id else f"department {self.department.slug}"
        return f"{owner}: {self.class_label()} {admission.fmt(self.guaranteed_cu)} CU"

    # ---- resource class -------------------------------------------------------------------------

    @property
    def class_key(self) -> str:
        if self.resource_class == ResourceClass.VENDOR:
            return f"vendor:{self.vendor}"
        if self.resource_class == ResourceClass.DEVICE_MODEL:
            return f"model:{self.device_model_id}"
        if self.resource_class == ResourceClass.POOL:
            return f"pool:{self.pool_id}"
        return "any"

    def class_label(self) -> str:
        if self.resource_class == ResourceClass.VENDOR:
            return str(Vendor(self.vendor).label) if self.vendor in Vendor.values else self.vendor
        if self.resource_class == ResourceClass.DEVICE_MODEL:
            return self.device_model.name if self.device_model_id else "?"
        if self.resource_class == ResourceClass.POOL:
            return f"pool {self.pool.name}" if self.pool_id else "?"
        return str(_("any accelerator"))

    @property
    def owner_department_id(self) -> int | None:
        if self.department_id:
            return self.department_id
        return self.project.department_id if self.project_id else None

    # ---- validation -----------------------------------------------------------------------------

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if bool(self.department_id) == bool(self.project_id):
            errors["project"] = [str(_("A quota belongs to exactly one department or one project."))]
        targets = {
            ResourceClass.VENDOR: ("vendor", bool(self.vendor)),
            ResourceClass.DEVICE_MODEL: ("device_model", bool(self.device_model_id)),
            ResourceClass.POOL: ("pool", bool(self.pool_id)),
        }
        for cls, (name, present) in targets.items():
            if self.resource_class == cls and not present:
                errors[name] = [
                    str(_("Choose the %(what)s this quota covers.") % {"what": name.replace("_", " ")})
                ]
            elif self.resource_class != cls and present:
                errors[name] = [
                    str(_("Only a %(what)s quota names a %(what)s.") % {"what": name.replace("_", " ")})
                ]
        if self.guaranteed_cu is not None and self.guaranteed_cu < 0:
            errors["guaranteed_cu"] = [str(_("The guarantee cannot be negative."))]
        if self.borrowing_limit_cu is not None and self.borrowing_limit_cu < 0:
            errors["borrowing_limit_cu"] = [
                str(_("The borrowing limit cannot be negative; leave it empty for no limit."))
            ]
        if self.lending_limit_cu is not None:
            if self.lending_limit_cu < 0:
                errors["lending_limit_cu"] = [
                    str(_("The lending limit cannot be negative; leave it empty to lend all idle guarantee."))
                ]
            elif self.guaranteed_cu is not None and self.lending_limit_cu > self.guaranteed_cu:
                errors["lending_limit_cu"] = [str(_("The lending limit cannot exceed the guarantee."))]
        if (
            self.guaranteed_cu is not None
            and self.guaranteed_cu == 0
            and self.borrowing_limit_cu is not None
            and self.borrowing_limit_cu == 0
        ):
            errors["guaranteed_cu"] = [
                str(
                    _(
                        "A quota with no guarantee and a zero borrowing limit admits nothing; give a positive guarantee or borrowing limit."
                    )
                )
            ]
        if self.memory_limit_mib is not None and self.memory_limit_mib <= 0:
            errors["memory_limit_mib"] = [
                str(_("The memory limit must be positive; leave it empty for none."))
            ]
        if self.over_quota_weight is not None and self.over_quota_weight <= 0:
            errors["over_quota_weight"] = [str(_("The over-quota weight must be positive."))]
        if self.time_zone not in available_timezones():
            errors["time_zone"] = [str(_("Unknown time zone %(tz)r.") % {"tz": self.time_zone})]
        try:
            windows = parse_windows(self.lending_windows)
        except ValueError as exc:
            errors["lending_windows"] = [str(exc)]
        else:
            clash = admission.windows_overlap(windows)
            if clash:
                errors["lending_windows"] = [
                    str(_("Windows %(a)d and %(b)d overlap.") % {"a": clash[0] + 1, "b": clash[1] + 1})
                ]
        if errors:
            raise ValidationError(errors)
