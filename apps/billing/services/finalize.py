"""Finalizing bills: a draft becomes immutable (only when no card of the month was over-booked), and
the projects hear about it (``apps.notify.services.notify``, queued in the finalizing transaction)."""

from __future__ import annotations

from datetime import date, datetime

from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from apps.accounts.models import Project
from apps.billing.models import (
    Bill,
    BillFinalized,
    BillingPeriod,
)
from apps.billing.services.months import month_bounds
from apps.core.audit import actor_fields, change_record_create
from apps.core.errors import Conflict
from apps.notify.models import Event
from apps.notify.services import notify
from apps.scheduling.invariants import allocation_capacity_violations

MAX_REPORTED_VIOLATIONS = 50  # a refused close lists at most this many over-allocations


def _ensure_capacity_kept(month: date) -> None:
    """Refuse (409) to bill a month in which some card held more than it has (DESIGN.md: no device is
    ever over-allocated); the details list every card, stretch of time, allocation and limit."""
    start, end = month_bounds(month)
    violations = allocation_capacity_violations(start=start, end=end)
    if not violations:
        return
    shown = violations[:MAX_REPORTED_VIOLATIONS]
    raise Conflict(
        _(
            "Month %(month)s cannot be finalized: %(count)s over-allocation(s) of a card, "
            "e.g. %(example)s. Correct the allocations first."
        )
        % {"month": f"{month:%Y-%m}", "count": len(violations), "example": shown[0].describe()},
        details={"violations": [v.as_dict() for v in shown], "count": len(violations)},
        code="capacity_exceeded",
    )


def _bills_finalize(bills, *, now: datetime) -> int:
    """Finalize draft bills in one statement, snapshotting the names their documents print."""
    project = Project.objects.filter(pk=OuterRef("project_id"))
    ids = list(bills.filter(state=Bill.State.DRAFT).values_list("pk", flat=True))
    done = Bill.objects.filter(pk__in=ids, state=Bill.State.DRAFT).update(
        state=Bill.State.FINALIZED,
        finalized_at=now,
        project_name=Subquery(project.values("name")[:1]),
        project_slug=Subquery(project.values("slug")[:1]),
        department_name=Subquery(project.values("department__name")[:1]),
    )
    _finalized_notify(ids)
    return done


def _finalized_notify(bill_ids: list[int]) -> None:
    """Tell each project its bill is final (queued in the finalizing transaction; a queryset update
    sends no post_save, so the finalizer says it itself)."""
    if not bill_ids:
        return
    for bill in Bill.objects.filter(pk__in=bill_ids).select_related("project"):
        notify(
            str(Event.BILL_FINALIZED),
            key=f"bill:{bill.pk}:finalized",
            message=gettext_noop(
                "The bill of project %(project)s for %(month)s is final: %(total)s %(currency)s."
            ),
            params={
                "project": bill.project.slug,
                "month": bill.month.strftime("%Y-%m"),
                "total": str(bill.total),
                "currency": bill.currency,
            },
            project=bill.project,
            link=reverse("billing:bill-detail", kwargs={"pk": bill.pk}),
        )


@transaction.atomic
def bill_finalize(*, bill: Bill, actor) -> Bill:
    """Lock a draft bill. Finalizing a finalized bill is a 409; so is a bill of a month whose
    allocations over-book a card."""
    if Bill.objects.filter(pk=bill.pk, state=Bill.State.FINALIZED).exists():
        raise BillFinalized(f"Bill {bill} is already finalized.")
    _ensure_capacity_kept(bill.month)
    updated = _bills_finalize(Bill.objects.filter(pk=bill.pk), now=timezone.now())
    if not updated:
        raise BillFinalized(f"Bill {bill} is already finalized.")
    bill = Bill.objects.get(pk=bill.pk)
    change_record_create(
        actor=actor,
        action="billing.bill_finalize",
        obj=bill,
        before={"state": "draft"},
        after={"state": bill.state},
    )
    period = BillingPeriod.objects.select_for_update().get(pk=bill.period_id)
    if period.state == BillingPeriod.State.DRAFT and not period.bills.filter(state=Bill.State.DRAFT).exists():
        period.state = BillingPeriod.State.CLOSED
        period.closed_at = timezone.now()
        period.closed_by = actor_fields(actor)["actor_label"]
        period.save()
    return bill


def bill_update(*, bill: Bill, actor, **fields) -> Bill:
    """Bills are built by month close, not edited: a draft is rebuilt by closing again; a finalized
    bill is corrected with an adjustment. Always refuses (409) so callers get a precise message."""
    if Bill.objects.filter(pk=bill.pk, state=Bill.State.FINALIZED).exists():
        raise BillFinalized(
            _("Bill %(bill)s is finalized and cannot change; record an adjustment instead.") % {"bill": bill}
        )
    raise Conflict(
        _("Bills are computed from the ledger; close the month again to rebuild a draft."),
        code="bill_computed",
    )
