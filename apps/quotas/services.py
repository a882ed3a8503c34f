"""Quota writes (create / update / delete with the department bound, audited, ResourceQuota pushed) and
the database side of admission: the locked quota book the scheduling cycle admits placements against.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from apps.accounts.models import Department, Project
from apps.accounts.selectors import is_platform_staff
from apps.catalog.models import DeviceModel
from apps.catalog.selectors import coefficients_on
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.inventory.models import Cluster, Device
from apps.quotas import admission
from apps.quotas.models import Quota, ResourceClass, parse_windows

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


class QuotaExceeded(Conflict):
    code = "quota_exceeded"


def _check_staff(actor) -> None:
    """Users must be platform staff; a label ("demo-loader", "command") is an internal caller."""
    if isinstance(actor, str):
        return
    if not is_platform_staff(actor):
        raise PermissionDenied("Only platform administrators can change quotas.")


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
        raise ValidationFailed("Quota amounts must be numbers.", details=errors)


def _full_clean(quota: Quota) -> None:
    try:
        quota.full_clean()
    except ValidationError as exc:
        details = {name: [str(m) for m in messages] for name, messages in exc.message_dict.items()}
        raise ValidationFailed("The quota is invalid.", details=details) from None


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
                "The project guarantees would exceed the department's.",
                details={
                    "guaranteed_cu": [
                        f"Projects of department {dept_row.department.slug} would be guaranteed "
                        f"{admission.fmt(total)} CU of {quota.class_label()}, more than the department's "
                        f"{admission.fmt(dept_row.guaranteed_cu)} CU."
                    ]
                },
            )
    elif total > quota.guaranteed_cu:
        raise ValidationFailed(
            "The department guarantee is smaller than its projects' guarantees.",
            details={
                "guaranteed_cu": [
                    f"Its projects are already guaranteed {admission.fmt(total)} CU of {quota.class_label()}; "
                    f"the department's guarantee cannot be lower."
                ]
            },
        )


AUDIT_FIELDS = list(FIELDS)


@transaction.atomic
def quota_create(*, actor, **fields: Any) -> Quota:
    _check_staff(actor)
    unknown = set(fields).difference(FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(sorted(unknown))}.", details={f: ["unknown"] for f in unknown}
        )
    _decimals(fields)
    quota = Quota(**fields)
    _lock_department(quota)  # writers of one department's quotas go one at a time
    _full_clean(quota)  # includes the one-row-per-owner-and-class constraint
    _check_department_bound(quota)
    quota.save()
    change_record_create(actor=actor, action="quota.create", obj=quota, after=snapshot(quota, AUDIT_FIELDS))
    _push_affected(quota, actor=actor)
    return quota


@transaction.atomic
def quota_update(*, quota: Quota, actor, **fields: Any) -> Quota:
    _check_staff(actor)
    unknown = set(fields).difference(UPDATABLE)
    if unknown:
        raise ValidationFailed(
            f"These fields cannot be changed: {', '.join(sorted(unknown))}.",
            details={f: ["cannot be changed; delete the quota and create another"] for f in unknown},
        )
    _decimals(fields)
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    before = snapshot(quota, AUDIT_FIELDS)
    for name, value in fields.items():
        setattr(quota, name, value)
    _full_clean(quota)
    _check_department_bound(quota)
    quota.save()
    change_record_create(
        actor=actor, action="quota.update", obj=quota, before=before, after=snapshot(quota, AUDIT_FIELDS)
    )
    _push_affected(quota, actor=actor)
    return quota


@transaction.atomic
def quota_delete(*, quota: Quota, actor) -> None:
    _check_staff(actor)
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    if (
        quota.department_id
        and _same_class(Quota.objects.filter(project__department_id=quota.department_id), quota).exists()
    ):
        raise Conflict(
            "Projects of this department still have quotas of this class; delete or move them first."
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
    from worker.kube.manifests import resource_quota_manifest

    hard = resource_quota_hard(project)
    return resource_quota_manifest(project, hard) if hard else None


def resource_quota_push(*, project: Project, actor) -> list:
    """Write the project's ResourceQuota to the push outbox of every cluster (inside the caller's
    transaction; pushed after commit). Nothing when the project's quotas set no ceiling."""
    from apps.scheduling.models import PushAction
    from apps.scheduling.push import push_object_enqueue
    from worker.kube.manifests import namespace_manifest, resource_quota_manifest

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


# --------------------------------------------------------------------------------------------------
# the book: quotas + current usage, for admission


def device_classes(vendor: str, model_id: int | None, pool_id: int | None) -> list[str]:
    """A device's class keys, most specific first."""
    out = []
    if model_id:
        out.append(f"model:{model_id}")
    if pool_id:
        out.append(f"pool:{pool_id}")
    if vendor:
        out.append(f"vendor:{vendor}")
    out.append("any")
    return out


def lending_open(quota: Quota, now: dt.datetime) -> bool:
    if not quota.lending_windows:
        return False
    try:
        windows = parse_windows(quota.lending_windows)
        local = now.astimezone(ZoneInfo(quota.time_zone))
    except (ValueError, KeyError):
        return False
    return admission.window_open(windows, local.hour * 60 + local.minute)


@dataclass
class QuotaContext:
    """The book plus the per-project row lookup; ``project_rows`` is empty for unlimited projects."""

    book: admission.Book
    project_rows: dict[int, dict[str, str]] = field(default_factory=dict)  # project → class → row key
    quotas: dict[str, Quota] = field(default_factory=dict)

    def row_for(self, project_id: int, classes: list[str]) -> str | None:
        rows = self.project_rows.get(project_id, {})
        for cls in classes:
            if cls in rows:
                return rows[cls]
        return None

    def limited(self, project_id: int) -> bool:
        return project_id in self.project_rows


def quota_context(*, lock: bool = False, now: dt.datetime | None = None) -> QuotaContext:
    """Load every quota row (locked ``FOR UPDATE`` in primary-key order when ``lock``), the fleet's
    capacity per class and the active allocations' use of each row.

    Locking every quota row serializes admissions: concurrent cycles can never both take the same
    guarantee or borrowing headroom (they read usage only after the lock is theirs).
    """
    now = now or timezone.now()
    qs = Quota.objects.select_related("project", "department", "project__department").order_by("pk")
    if lock:
        qs = qs.select_for_update(of=("self",))
    quotas = list(qs)
    if not quotas:
        return QuotaContext(book=admission.Book())
    rows, departments = [], []
    project_rows: dict[int, dict[str, str]] = defaultdict(dict)
    by_key: dict[str, Quota] = {}
    for q in quotas:
        opened = lending_open(q, now)
        if q.project_id:
            key = str(q.pk)
            by_key[key] = q
            project_rows[q.project_id][q.class_key] = key
            rows.append(
                admission.Row(
                    key=key,
                    project=q.project.slug,
                    department=q.project.department.slug,
                    resource_class=q.class_key,
                    guaranteed=q.guaranteed_cu,
                    borrowing_limit=q.borrowing_limit_cu,
                    lending_limit=q.lending_limit_cu,
                    lending_open=opened,
                    weight=q.over_quota_weight,
                    memory_limit_mib=q.memory_limit_mib,
                )
            )
        else:
            departments.append(
                admission.DepartmentRow(
                    department=q.department.slug,
                    resource_class=q.class_key,
                    guaranteed=q.guaranteed_cu,
                    borrowing_limit=q.borrowing_limit_cu,
                    lending_limit=q.lending_limit_cu,
                    lending_open=opened,
                )
            )
    classes = {r.resource_class for r in rows} | {d.resource_class for d in departments}
    capacity = class_capacity(classes, on=timezone.localdate(now))
    ctx = QuotaContext(
        book=admission.Book(rows, departments, capacity), project_rows=dict(project_rows), quotas=by_key
    )
    for holding in _holdings(ctx):
        ctx.book.hold(holding)
    return ctx


def class_capacity(classes: set[str], *, on: dt.date) -> dict[str, Decimal | None]:
    """CU of the usable cards in each class (a card without a coefficient counts 0)."""
    devices = list(
        Device.objects.exclude(health__in=[Device.Health.LOST, Device.Health.RETIRED])
        .exclude(node__status="retired")
        .values_list("vendor", "device_model_id", "node__pool_id")
    )
    coefficients = coefficients_on({m for _v, m, _p in devices if m}, on=on)
    capacity: dict[str, Decimal | None] = {cls: Decimal(0) for cls in classes}
    for vendor, model_id, pool_id in devices:
        coef = coefficients.get(model_id, Decimal(0))
        for cls in device_classes(vendor, model_id, pool_id):
            if cls in capacity:
                capacity[cls] += coef
    return capacity


def _holdings(ctx: QuotaContext) -> list[admission.Holding]:
    from apps.scheduling.models import Allocation

    rows = Allocation.objects.filter(
        released_at__isnull=True, job__project_id__in=list(ctx.project_rows)
    ).values_list(
        "job_id",
        "job__project_id",
        "job__priority",
        "device__vendor",
        "device__device_model_id",
        "node__pool_id",
        "compute_units",
        "borrowed",
        "memory_mib",
        "started_at",
    )
    grouped: dict[tuple[int, str], admission.Holding] = {}
    for job_id, project_id, priority, vendor, model_id, pool_id, cu, borrowed, memory, started in rows:
        key = ctx.row_for(project_id, device_classes(vendor, model_id, pool_id))
        if key is None:
            continue
        h = grouped.get((job_id, key))
        if h is None:
            h = grouped[(job_id, key)] = admission.Holding(
                job=str(job_id),
                row=key,
                guaranteed=Decimal(0),
                borrowed=Decimal(0),
                priority=priority,
                started=started.timestamp(),
            )
        if borrowed:
            h.borrowed += cu
        else:
            h.guaranteed += cu
        h.memory_mib += memory
        h.started = min(h.started, started.timestamp())
    return list(grouped.values())


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
                f"project {job.project.slug} has no quota covering {vendor or 'these'} cards",
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
    vendors, model_id = _request_targets(job)
    covering = [q for q in rows if _may_cover(q, vendors, model_id)]
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


def _request_targets(job) -> tuple[set[str], int | None]:
    kind = job.request_kind
    if kind == "template":
        return {job.template.device_model.vendor}, job.template.device_model_id
    if kind == "whole_cards":
        if job.device_model_id:
            return {job.device_model.vendor}, job.device_model_id
        return ({job.vendor} if job.vendor else set()), None
    if kind == "compute_units":
        return set(job.allowed_vendors or []), None
    return set(), None


def _may_cover(quota: Quota, vendors: set[str], model_id: int | None) -> bool:
    if quota.resource_class in (ResourceClass.ANY, ResourceClass.POOL):
        return True
    if quota.resource_class == ResourceClass.VENDOR:
        return not vendors or quota.vendor in vendors
    if model_id is not None:
        return quota.device_model_id == model_id
    return not vendors or quota.device_model.vendor in vendors
