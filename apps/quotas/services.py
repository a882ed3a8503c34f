"""Quota writes (create / update / delete with the department bound, audited, ResourceQuota pushed) and
the database side of admission: the locked quota book the scheduling cycle admits placements against.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.accounts.models import Department, Project
from apps.catalog.models import DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict, ValidationFailed
from apps.core.permissions import require_staff
from apps.core.services import model_update
from apps.core.stored_text import stored
from apps.core.validation import validate
from apps.inventory.models import Cluster, Device
from apps.quotas import admission
from apps.quotas.book import QuotaContext, device_classes, may_cover, request_targets
from apps.quotas.models import Quota, ResourceClass

FIELDS = (
    "department",
    "project",
    "resource_class",
    "vendor",
    "device_model",
    "pool",
    "guaranteed_cu",
    "borrowing_limit_cu",
    "lending_limit_cu",
    "memory_limit_mib",
    "lending_windows",
    "time_zone",
    "over_quota_weight",
)
UPDATABLE = FIELDS[6:]
DECIMALS = ("guaranteed_cu", "borrowing_limit_cu", "lending_limit_cu", "over_quota_weight")
_STAFF_ONLY = gettext_lazy("Only platform administrators can change quotas.")
# Why a job waits (its state reason), in the reader's language (apps.core.stored_text).
UNCOVERED = stored("project %(project)s has no quota covering %(vendor)s cards")
UNCOVERED_ANY = stored("project %(project)s has no quota covering these cards")


class QuotaExceeded(Conflict):
    code = "quota_exceeded"


def _decimals(fields: dict[str, Any]) -> None:
    errors = {}
    for name in DECIMALS:
        value = fields.get(name)
        if value is None or isinstance(value, Decimal):
            continue
        try:
            fields[name] = Decimal(str(value))
        except InvalidOperation:
            errors[name] = ["not a number"]
    if errors:
        raise ValidationFailed(_("Quota amounts must be numbers."), details=errors)


def _same_class(qs, quota: Quota):
    return qs.filter(
        resource_class=quota.resource_class,
        vendor=quota.vendor,
        device_model_id=quota.device_model_id,
        pool_id=quota.pool_id,
    )


def _lock_department(quota: Quota) -> None:
    """Serialize writers of one department's quotas (its own and its projects'): lock its row."""
    if quota.owner_department_id is not None:
        Department.objects.select_for_update().filter(pk=quota.owner_department_id).first()


def _check_department_bound(quota: Quota) -> None:
    """A department's guarantee bounds the sum of its projects' guarantees in the same class."""
    department_id = quota.owner_department_id
    if department_id is None:
        return
    _lock_department(quota)
    dept_row = (
        _same_class(Quota.objects.filter(department_id=department_id), quota).exclude(pk=quota.pk).first()
    )
    projects = _same_class(Quota.objects.filter(project__department_id=department_id), quota).exclude(
        pk=quota.pk
    )
    total = projects.aggregate(total=Sum("guaranteed_cu"))["total"] or Decimal(0)
    if quota.project_id:
        total += quota.guaranteed_cu
        if dept_row is not None and total > dept_row.guaranteed_cu:
            raise ValidationFailed(
                _("The project guarantees would exceed the department's."),
                details={
                    "guaranteed_cu": [
                        _(
                            "Projects of department %(department)s would be guaranteed %(total)s CU of "
                            "%(class)s, more than the department's %(guaranteed)s CU."
                        )
                        % {
                            "department": dept_row.department.slug,
                            "total": admission.fmt(total),
                            "class": quota.class_label(),
                            "guaranteed": admission.fmt(dept_row.guaranteed_cu),
                        }
                    ]
                },
            )
    elif total > quota.guaranteed_cu:
        raise ValidationFailed(
            _("The department guarantee is smaller than its projects' guarantees."),
            details={
                "guaranteed_cu": [
                    _(
                        "Its projects are already guaranteed %(total)s CU of %(class)s; "
                        "the department's guarantee cannot be lower."
                    )
                    % {"total": admission.fmt(total), "class": quota.class_label()}
                ]
            },
        )


AUDIT_FIELDS = list(FIELDS)


@transaction.atomic
def quota_create(*, actor, **fields: Any) -> Quota:
    require_staff(actor, message=str(_STAFF_ONLY))
    unknown = set(fields).difference(FIELDS)
    if unknown:
        raise ValidationFailed(
            _("Unknown fields: %(fields)s.") % {"fields": ", ".join(sorted(unknown))},
            details={f: ["unknown"] for f in unknown},
        )
    _decimals(fields)
    quota = Quota(**fields)
    _lock_department(quota)  # writers of one department's quotas go one at a time
    validate(quota, what="quota")  # includes the one-row-per-owner-and-class constraint
    _check_department_bound(quota)
    quota.save()
    change_record_create(actor=actor, action="quota.create", obj=quota, after=snapshot(quota, AUDIT_FIELDS))
    _push_affected(quota, actor=actor)
    return quota


@transaction.atomic
def quota_update(*, quota: Quota, actor, **fields: Any) -> Quota:
    require_staff(actor, message=str(_STAFF_ONLY))
    unknown = set(fields).difference(UPDATABLE)
    if unknown:
        raise ValidationFailed(
            _("These fields cannot be changed: %(fields)s.") % {"fields": ", ".join(sorted(unknown))},
            details={f: ["cannot be changed; delete the quota and create another"] for f in unknown},
        )
    _decimals(fields)
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    # Every update request is recorded, with the whole quota before and after.
    quota, _changed = model_update(
        instance=quota,
        fields=UPDATABLE,
        data=fields,
        actor=actor,
        action="quota.update",
        what="quota",
        audit_fields=AUDIT_FIELDS,
        check=_check_department_bound,
        record_unchanged=True,
    )
    _push_affected(quota, actor=actor)
    return quota


@transaction.atomic
def quota_delete(*, quota: Quota, actor) -> None:
    require_staff(actor, message=str(_STAFF_ONLY))
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    if (
        quota.department_id
        and _same_class(Quota.objects.filter(project__department_id=quota.department_id), quota).exists()
    ):
        raise Conflict(
            _("Projects of this department still have quotas of this class; delete or move them first.")
        )
    before = snapshot(quota, AUDIT_FIELDS)
    change_record_create(actor=actor, action="quota.delete", obj=quota, before=before)
    project = quota.project
    quota.delete()
    if project is not None:
        resource_quota_push(project=project, actor=actor)


# --------------------------------------------------------------------------------------------------
# Kubernetes ResourceQuota per project namespace


def resource_quota_hard(project: Project) -> dict[str, int]:
    """Whole-device resource counts (seed 004 §5 names, e.g. ``nvidia.com/gpu``) a namespace may hold:
    per row, the ceiling (guarantee + borrowing limit) in cards of the cheapest model it covers."""
    from apps.inventory.vendors import ADAPTERS

    rows = list(Quota.objects.filter(project=project).select_related("device_model"))
    if not rows:
        return {}
    models = list(DeviceModel.objects.filter(devices__isnull=False).distinct())
    if not models:
        models = list(DeviceModel.objects.all())
    coefficients = coefficients_on([m.pk for m in models])
    pool_models: dict[int, set[int]] = defaultdict(set)
    for pool_id, model_id in Device.objects.filter(node__pool__isnull=False).values_list(
        "node__pool_id", "device_model_id"
    ):
        if model_id:
            pool_models[pool_id].add(model_id)
    hard: dict[str, int] = defaultdict(int)
    for row in rows:
        if row.borrowing_limit_cu is None:
            continue  # unbounded borrowing: no hard ceiling for Kubernetes to enforce
        ceiling = row.guaranteed_cu + row.borrowing_limit_cu
        if row.resource_class == ResourceClass.DEVICE_MODEL:
            covered = [m for m in models if m.pk == row.device_model_id] or [row.device_model]
        elif row.resource_class == ResourceClass.VENDOR:
            covered = [m for m in models if m.vendor == row.vendor]
        elif row.resource_class == ResourceClass.POOL:
            covered = [m for m in models if m.pk in pool_models.get(row.pool_id, set())]
        else:
            covered = models
        cheapest: dict[str, Decimal] = {}
        for model in covered:
            coef = coefficients.get(model.pk)
            if coef and (model.vendor not in cheapest or coef < cheapest[model.vendor]):
                cheapest[model.vendor] = coef
        for vendor, coef in cheapest.items():
            adapter = ADAPTERS.get(vendor)
            if adapter is not None:
                hard[adapter.resource_name] += math.floor(ceiling / coef)
    return dict(hard)


def resource_quota_render(project: Project) -> dict | None:
    from apps.clusters.manifests import resource_quota_manifest

    hard = resource_quota_hard(project)
    return resource_quota_manifest(project, hard) if hard else None


def resource_quota_push(*, project: Project, actor) -> list:
    """Write the project's ResourceQuota to the push outbox of every cluster (inside the caller's
    transaction; pushed after commit). Nothing when the project's quotas set no ceiling."""
    from apps.clusters.manifests import namespace_manifest, resource_quota_manifest
    from apps.clusters.models import PushAction
    from apps.clusters.outbox import push_object_enqueue

    manifest = resource_quota_render(project)
    verb = "apply"
    if manifest is None:
        # No ceiling any more: delete the object pushed earlier, if any.
        manifest = resource_quota_manifest(project, {})
        pushed = PushAction.objects.filter(
            kind="ResourceQuota", namespace=manifest["metadata"]["namespace"], verb="apply"
        )
        if not pushed.exists():
            return []
        verb = "delete"
    actions = []
    for cluster in Cluster.objects.order_by("pk"):
        if verb == "apply":
            # The namespace first (due earlier, so pushed first): a ResourceQuota needs it to exist.
            actions.append(
                push_object_enqueue(cluster=cluster, manifest=namespace_manifest(project), actor=actor)
            )
        actions.append(push_object_enqueue(cluster=cluster, manifest=manifest, actor=actor, verb=verb))
    return actions


def _push_affected(quota: Quota, *, actor) -> None:
    if quota.project_id:
        resource_quota_push(project=quota.project, actor=actor)


@dataclass
class PlacementAdmission:
    admitted: bool
    borrowed: list[bool]
    reason: str = ""
    data: dict = field(default_factory=dict)


def placement_admit(
    ctx: QuotaContext,
    *,
    job,
    items: list[tuple[str, int | None, int | None, Decimal, int]],
    started: float,
) -> PlacementAdmission:
    """Admit one placement against its project's quota rows and hold it in the book.

    ``items``: one per allocation row (vendor, device model id, pool id, CU, memory MiB). A project
    without quotas is unlimited (nothing borrowed); a card no quota row of a limited project covers is
    refused.
    """
    if not ctx.limited(job.project_id):
        return PlacementAdmission(True, [False] * len(items))
    by_row: dict[str, list[int]] = defaultdict(list)
    for i, (vendor, model_id, pool_id, _cu, _mem) in enumerate(items):
        key = ctx.row_for(job.project_id, device_classes(vendor, model_id, pool_id))
        if key is None:
            return PlacementAdmission(
                False,
                [False] * len(items),
                (UNCOVERED % {"project": job.project.slug, "vendor": vendor})
                if vendor
                else (UNCOVERED_ANY % {"project": job.project.slug}),
                {"limit": "uncovered"},
            )
        by_row[key].append(i)
    flags = [False] * len(items)
    decisions = []
    for key, indexes in by_row.items():
        amounts = [items[i][3] for i in indexes]
        memory = sum(items[i][4] for i in indexes)
        decision = ctx.book.admit(key, amounts, memory_mib=memory)
        if not decision.admitted:
            if decisions:  # undo the rows already held for this job
                ctx.book.release(str(job.pk))
            return PlacementAdmission(False, flags, decision.reason, {"limit": decision.limit, "row": key})
        ctx.book.hold(
            admission.Holding(
                job=str(job.pk),
                row=key,
                guaranteed=decision.guaranteed_cu,
                borrowed=decision.borrowed_cu,
                priority=job.priority,
                started=started,
                memory_mib=memory,
            )
        )
        decisions.append((key, decision))
        for i, flag in zip(indexes, decision.borrowed, strict=True):
            flags[i] = flag
    borrowed = sum((d.borrowed_cu for _k, d in decisions), Decimal(0))
    return PlacementAdmission(
        True,
        flags,
        "",
        {
            "guaranteed_cu": str(sum((d.guaranteed_cu for _k, d in decisions), Decimal(0))),
            "borrowed_cu": str(borrowed),
        },
    )


# --------------------------------------------------------------------------------------------------
# submission ceiling


def submission_check(job) -> None:
    """Refuse (409) a request larger than even its project's borrowing ceiling; accept the rest."""
    rows = list(Quota.objects.filter(project_id=job.project_id).select_related("device_model"))
    if not rows or job.requested_cu is None:
        return
    vendors, model_id = request_targets(job)
    covering = [q for q in rows if may_cover(q, vendors, model_id)]
    if not covering:
        raise QuotaExceeded(
            f"Project {job.project.slug} has no quota for {', '.join(sorted(vendors)) or 'these'} cards.",
            details={"quota": ["no quota row of the project covers the requested cards"]},
        )
    ceilings = [
        None if q.borrowing_limit_cu is None else q.guaranteed_cu + q.borrowing_limit_cu for q in covering
    ]
    if any(c is None for c in ceilings):
        return
    ceiling = max(ceilings)
    if job.requested_cu > ceiling:
        raise QuotaExceeded(
            f"The request needs {admission.fmt(job.requested_cu)} CU but project {job.project.slug} can "
            f"never hold more than {admission.fmt(ceiling)} CU (guarantee + borrowing limit).",
            details={
                "quota": [
                    f"requested {admission.fmt(job.requested_cu)} CU > ceiling {admission.fmt(ceiling)} CU"
                ]
            },
        )
