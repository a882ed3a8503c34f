"""Chargeback (成本核算/账单, seed 000 §2.3 and seed 001 §5.1): rate cards, the usage ledger, bills.

Prices are per compute-unit-hour (one CU = the reference card for one hour, DESIGN.md "Compute
units"), so an hour on a 910B and an hour on a T4 slice cost what they are worth.

Invariants (the database backs every one of them):
- ``UsageEntry`` is append-only: one row per (allocation, hourly slice); on PostgreSQL a trigger
  refuses UPDATE and DELETE.
- A finalized ``Bill`` (and its lines) never changes: ``save()`` / ``delete()`` refuse it, and on
  PostgreSQL a trigger refuses UPDATE / DELETE of a finalized bill row and of its lines.
- Money and CU-hours are ``Decimal`` with fixed scales (see the ``*_QUANTUM`` constants).
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Project
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.core.errors import Conflict
from apps.core.indexes import BrinOnPostgres
from apps.inventory.models import Pool
from apps.jobs.models import Allocation, Job

# Scales. Entries keep sub-cent precision; bills are in cents (lines add up to the total exactly).
HOURS_QUANTUM = Decimal("0.000001")
CU_HOURS_QUANTUM = Decimal("0.000001")
ENTRY_AMOUNT_QUANTUM = Decimal("0.000001")
MONEY_QUANTUM = Decimal("0.01")


class BillFinalized(Conflict):
    code = "bill_finalized"


class LedgerAppendOnly(Conflict):
    code = "ledger_append_only"


class IdlePolicy(models.TextChoices):
    """What happens to the cost of capacity nobody used (OpenCost's idle cost)."""

    NONE = "none", _("not charged")
    SPREAD = "spread", _("spread over projects in proportion to use")
    PLATFORM = "platform", _("charged to the platform")


class UsageBasis(models.TextChoices):
    ALLOCATED = "allocated", _("allocated")
    MAX = "max", _("max(allocated, measured)")


class RateCard(models.Model):
    """A price per compute-unit-hour for a scope (everything, a pool, a device model or a template)
    from a date on (``effective_to`` inclusive, empty = open-ended). The most specific card in force
    on a slice's day prices it: template, then device model, then pool, then the platform default.
    Two cards of the same scope never overlap in time."""

    class Scope(models.TextChoices):
        DEFAULT = "default", _("platform default")
        POOL = "pool", _("pool")
        DEVICE_MODEL = "device_model", _("device model")
        TEMPLATE = "template", _("compute template")

    name = models.CharField(_("name"), max_length=120)
    scope = models.CharField(_("scope"), max_length=12, choices=Scope.choices, default=Scope.DEFAULT)
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.PROTECT, related_name="rate_cards")
    device_model = models.ForeignKey(
        DeviceModel, null=True, blank=True, on_delete=models.PROTECT, related_name="rate_cards"
    )
    template = models.ForeignKey(
        ComputeTemplate, null=True, blank=True, on_delete=models.PROTECT, related_name="rate_cards"
    )
    price_per_cu_hour = models.DecimalField(_("price per CU-hour"), max_digits=12, decimal_places=4)
    currency = models.CharField(_("currency"), max_length=3, default="CNY")
    effective_from = models.DateField(_("effective from"))
    effective_to = models.DateField(_("effective to (inclusive)"), null=True, blank=True)
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "-effective_from", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(price_per_cu_hour__gte=0), name="billing_ratecard_price_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(effective_to__isnull=True) | Q(effective_to__gte=F("effective_from")),
                name="billing_ratecard_dates_ordered",
            ),
            models.CheckConstraint(
                condition=(
                    Q(
                        scope="default",
                        pool__isnull=True,
                        device_model__isnull=True,
                        template__isnull=True,
                    )
                    | Q(scope="pool", pool__isnull=False, device_model__isnull=True, template__isnull=True)
                    | Q(
                        scope="device_model",
                        pool__isnull=True,
                        device_model__isnull=False,
                        template__isnull=True,
                    )
                    | Q(
                        scope="template", pool__isnull=True, device_model__isnull=True, template__isnull=False
                    )
                ),
                name="billing_ratecard_scope_target",
            ),
        ]
        verbose_name = _("rate card")

    def __str__(self) -> str:
        return f"{self.name}: {self.price_per_cu_hour} {self.currency}/CU·h from {self.effective_from}"

    @property
    def target(self):
        return {"pool": self.pool, "device_model": self.device_model, "template": self.template}.get(
            self.scope
        )

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.price_per_cu_hour is not None and self.price_per_cu_hour < 0:
            errors.setdefault("price_per_cu_hour", []).append(_("A price cannot be negative."))
        if self.effective_to and self.effective_from and self.effective_to < self.effective_from:
            errors.setdefault("effective_to", []).append(_("The end date is before the start date."))
        targets = {"pool": self.pool_id, "device_model": self.device_model_id, "template": self.template_id}
        for field, value in targets.items():
            if field == self.scope and not value:
                errors.setdefault(field, []).append(
                    _("Choose the %(scope)s this card prices.") % {"scope": field}
                )
            elif field != self.scope and value:
                errors.setdefault(field, []).append(
                    _("Only a %(field)s-scoped card names a %(field)s.") % {"field": field}
                )
        if self.currency and (len(self.currency) != 3 or not self.currency.isalpha()):
            errors.setdefault("currency", []).append(_("Use a three-letter ISO 4217 code, e.g. CNY."))
        if errors:
            raise ValidationError(errors)


class RateCardDiscount(models.Model):
    """A project's discount on one rate card (percent off the price)."""

    rate_card = models.ForeignKey(RateCard, on_delete=models.CASCADE, related_name="discounts")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="rate_discounts")
    percent = models.DecimalField(_("discount %"), max_digits=5, decimal_places=2)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rate_card", "project"], name="billing_ratecarddiscount_unique"),
            models.CheckConstraint(
                condition=Q(percent__gte=0) & Q(percent__lte=100),
                name="billing_ratecarddiscount_percent_range",
            ),
        ]
        verbose_name = _("rate card discount")

    def __str__(self) -> str:
        return f"{self.project} −{self.percent}% on {self.rate_card.name}"


class BillingPeriod(models.Model):
    """One billing month (platform time zone). open → closing → draft (bills to review) → closed."""

    class State(models.TextChoices):
        OPEN = "open", _("open")
        CLOSING = "closing", _("closing")
        DRAFT = "draft", _("bills in draft")
        CLOSED = "closed", _("closed")

    month = models.DateField(_("month"), unique=True, help_text=_("the first day of the month"))
    state = models.CharField(max_length=8, choices=State.choices, default=State.OPEN)
    idle_policy = models.CharField(max_length=8, choices=IdlePolicy.choices, default=IdlePolicy.NONE)
    currency = models.CharField(max_length=3, default="CNY")
    # The latest close of this month (a core BackgroundRun): its progress is the month's progress.
    close_run = models.ForeignKey(
        "core.BackgroundRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Cost of capacity nobody used, and the part the platform carries (policy "platform").
    idle_cu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    idle_cost = models.DecimalField(max_digits=16, decimal_places=2, default=Decimal(0))
    platform_cost = models.DecimalField(max_digits=16, decimal_places=2, default=Decimal(0))
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-month"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["open", "closing", "draft", "closed"]),
                name="billing_billingperiod_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(idle_policy__in=["none", "spread", "platform"]),
                name="billing_billingperiod_idle_policy_valid",
            ),
            models.CheckConstraint(condition=Q(month__day=1), name="billing_billingperiod_first_day"),
        ]
        verbose_name = _("billing period")

    def __str__(self) -> str:
        return self.month.strftime("%Y-%m")

    @property
    def label(self) -> str:
        return self.month.strftime("%Y-%m")

    def _close_progress(self) -> dict:
        """The close run's progress (live while it runs); fetch periods with select_related("close_run")."""
        if self.close_run_id is None:
            return {"done": 0, "total": 0, "message": "", "percent": 0}
        from apps.core.runs import run_progress_read

        return run_progress_read(self.close_run)

    @property
    def progress_done(self) -> int:
        return self._close_progress()["done"]

    @property
    def progress_total(self) -> int:
        return self._close_progress()["total"]

    @property
    def progress_message(self) -> str:
        return self._close_progress()["message"]

    @property
    def progress_percent(self) -> int:
        if self.state == self.State.CLOSED:
            return 100
        return self._close_progress()["percent"]


# A usage entry's key copied from its allocation's rows (see UsageEntry).
_COPIED_KEY = {"on_delete": models.PROTECT, "related_name": "usage_entries", "db_constraint": False}


class UsageEntry(models.Model):
    """One allocation over one hourly slice (append-only). ``month`` is the billing month the entry
    counts in: the slice's month, or the next open month when the slice's month was already closed
    (late data)."""

    # project, job, device_model, template and pool are copies of what the allocation's own rows hold
    # (Allocation.project/job, the job's template, the device's model, the node's pool), read in the same
    # transaction that writes the entry (apps.billing.services.metering): the five keep no constraint of
    # their own, whose checks were most of the ledger's write cost (issue 31 §3). allocation has none
    # either (migration 0008): metering reads the allocation in the transaction that writes its entries,
    # allocations are never deleted (Job → Allocation and Allocation → entries are PROTECT), and the
    # check (a row lock on each of a month's million allocations at commit) was a third of a month's
    # metering; deleting an allocation under a run writing its entries waits for the run and is then
    # refused (PostgreSQL: billing 0010's trigger). rate_card has none either (migration 0009): its check at commit was a key-share lock per
    # entry; metering holds a key-share lock on every rate card instead (one statement), and deleting a
    # rate card locks it before asking whether an entry names it (apps.billing.services.rate_cards), so
    # a card is never deleted under entries being written. on_delete=PROTECT still guards ORM deletes.
    # allocation and project have no index of their own: one_per_slice and billing_entry_proj_slice_idx
    # lead with them. device_model, pool and rate_card have none either (migration 0012): a few values
    # each, so every entry went to the hot end of one of a few long posting lists, a fifth of a 100,000-card
    # month's metering (issue 31 §3); what reads them (a ledger filter, PROTECT's check when a model, pool
    # or rate card is deleted) scans the ledger instead, in slice order.
    project = models.ForeignKey(Project, db_index=False, **_COPIED_KEY)
    # job has no index either (migration 0013): a job's entries are found through its allocations
    # (``apps.billing.selectors.entries_of_job``), whose key leads one_per_slice.
    job = models.ForeignKey(Job, db_index=False, **_COPIED_KEY)
    allocation = models.ForeignKey(Allocation, db_index=False, **_COPIED_KEY)
    device_model = models.ForeignKey(DeviceModel, null=True, blank=True, db_index=False, **_COPIED_KEY)
    # Most entries have no template (whole cards, slices): its index holds only those that have one.
    template = models.ForeignKey(ComputeTemplate, null=True, blank=True, db_index=False, **_COPIED_KEY)
    pool = models.ForeignKey(Pool, null=True, blank=True, db_index=False, **_COPIED_KEY)
    month = models.DateField()  # billing_entry_month_brin
    slice_start = models.DateTimeField()
    slice_end = models.DateTimeField()
    hours = models.DecimalField(max_digits=10, decimal_places=6)
    compute_units = models.DecimalField(max_digits=12, decimal_places=4)
    basis = models.CharField(max_length=10, choices=UsageBasis.choices, default=UsageBasis.ALLOCATED)
    cu_hours = models.DecimalField(max_digits=18, decimal_places=6)
    rate_card = models.ForeignKey(
        RateCard,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="usage_entries",
        db_constraint=False,
        db_index=False,
    )
    unit_price = models.DecimalField(max_digits=12, decimal_places=4)
    discount_percent = models.DecimalField(max_digits=5, decimal_places=2, default=Decimal(0))
    currency = models.CharField(max_length=3, default="CNY")
    amount = models.DecimalField(max_digits=18, decimal_places=6)
    late = models.BooleanField(default=False, help_text=_("metered after its own month had closed"))
    metered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-slice_start", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "slice_start"], name="billing_usageentry_one_per_slice"
            ),
            models.CheckConstraint(
                condition=Q(slice_end__gt=F("slice_start")), name="billing_usageentry_slice_ordered"
            ),
            models.CheckConstraint(
                condition=Q(hours__gt=0) & Q(hours__lte=1), name="billing_usageentry_hours_range"
            ),
            models.CheckConstraint(
                condition=Q(cu_hours__gte=0) & Q(amount__gte=0) & Q(unit_price__gte=0),
                name="billing_usageentry_not_negative",
            ),
            models.CheckConstraint(condition=Q(month__day=1), name="billing_usageentry_month_first_day"),
        ]
        indexes = [
            # A month's entries (the close, the vendor share): a BRIN on PostgreSQL, since entries are
            # appended month after month (migration 0013; the b-tree on (month, project) it replaced had a
            # few hundred keys, so every entry went to the hot end of a long posting list).
            BrinOnPostgres(fields=["month"], name="billing_entry_month_brin"),
            models.Index(fields=["project", "slice_start"], name="billing_entry_proj_slice_idx"),
            # The ledger's order (newest slice first): a page without sorting every entry (issue 20).
            models.Index(fields=["slice_start", "id"], name="billing_entry_slice_idx"),
            # PROTECT's check and the ledger's template filter name one template (never NULL).
            models.Index(
                fields=["template"], condition=Q(template__isnull=False), name="billing_entry_template_idx"
            ),
        ]
        verbose_name = _("usage entry")
        verbose_name_plural = _("usage entries")

    def __str__(self) -> str:
        return f"allocation {self.allocation_id} @ {self.slice_start:%Y-%m-%d %H:%M}: {self.cu_hours} CU·h"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise LedgerAppendOnly("Usage entries are append-only; correct a bill with an adjustment.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise LedgerAppendOnly("Usage entries are append-only; correct a bill with an adjustment.")


class Bill(models.Model):
    """One project's bill for one month. A finalized bill never changes."""

    class State(models.TextChoices):
        DRAFT = "draft", _("draft")
        FINALIZED = "finalized", _("finalized")

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="bills")
    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT, related_name="bills")
    month = models.DateField(db_index=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.DRAFT)
    currency = models.CharField(max_length=3, default="CNY")
    # Showback: compute-unit-hours used; guaranteed CU-hours from the project's quotas
    # (apps.quotas.selectors.guaranteed_cu_hours); null when the project has no quota.
    used_cu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    guaranteed_cu_hours = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    entry_count = models.PositiveIntegerField(default=0)
    usage_amount = models.DecimalField(max_digits=16, decimal_places=2, default=Decimal(0))
    adjustments_amount = models.DecimalField(max_digits=16, decimal_places=2, default=Decimal(0))
    idle_share_amount = models.DecimalField(max_digits=16, decimal_places=2, default=Decimal(0))
    total = models.DecimalField(max_digits=16, decimal_places=2, default=Decimal(0))
    finalized_at = models.DateTimeField(null=True, blank=True)
    # Names as they were when the bill was finalized (its documents print these, so renaming a project
    # or a department later never changes a finalized bill). Empty on a draft: drafts show live names.
    project_name = models.CharField(max_length=200, blank=True)
    project_slug = models.CharField(max_length=100, blank=True)
    department_name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-month", "project__name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "month"], name="billing_bill_one_per_month"),
            models.CheckConstraint(
                condition=Q(state__in=["draft", "finalized"]), name="billing_bill_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(total=F("usage_amount") + F("adjustments_amount") + F("idle_share_amount")),
                name="billing_bill_total_adds_up",
            ),
            models.CheckConstraint(
                condition=Q(state="draft") | Q(finalized_at__isnull=False),
                name="billing_bill_finalized_has_time",
            ),
            models.CheckConstraint(
                condition=Q(state="draft") | ~Q(project_slug=""),
                name="billing_bill_finalized_has_names",
            ),
        ]
        verbose_name = _("bill")

    def __str__(self) -> str:
        return f"{self.project.slug} {self.month:%Y-%m}"

    def save(self, *args, **kwargs):
        if self._stored_finalized():
            raise BillFinalized(f"Bill {self} is finalized and cannot change; record an adjustment instead.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self._stored_finalized():
            raise BillFinalized(f"Bill {self} is finalized and cannot be deleted.")
        return super().delete(*args, **kwargs)

    @property
    def label(self) -> str:
        return self.month.strftime("%Y-%m")

    def _stored_finalized(self) -> bool:
        return self.pk is not None and Bill.objects.filter(pk=self.pk, state=self.State.FINALIZED).exists()


class BillLine(models.Model):
    """One line of a bill. Groups: ``resource`` (by device model / template) and ``job`` each add up to
    the usage amount; ``adjustment`` and ``idle`` lines add up to theirs."""

    class Group(models.TextChoices):
        RESOURCE = "resource", _("by device model / template")
        JOB = "job", _("by job")
        ADJUSTMENT = "adjustment", _("adjustment")
        IDLE = "idle", _("idle-cost share")

    bill = models.ForeignKey(Bill, on_delete=models.CASCADE, related_name="lines")
    group = models.CharField(max_length=10, choices=Group.choices)
    position = models.PositiveIntegerField(default=0)
    label = models.CharField(max_length=300)
    device_model = models.ForeignKey(
        DeviceModel, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    template = models.ForeignKey(
        ComputeTemplate, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.PROTECT, related_name="bill_lines")
    cu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    amount = models.DecimalField(max_digits=16, decimal_places=2)

    class Meta:
        ordering = ["bill", "group", "position"]
        constraints = [
            models.CheckConstraint(
                condition=Q(group__in=["resource", "job", "adjustment", "idle"]),
                name="billing_billline_group_valid",
            ),
        ]
        verbose_name = _("bill line")

    def __str__(self) -> str:
        return f"{self.label}: {self.amount}"

    def save(self, *args, **kwargs):
        if self._bill_finalized():
            raise BillFinalized("The bill is finalized; its lines cannot change.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self._bill_finalized():
            raise BillFinalized("The bill is finalized; its lines cannot change.")
        return super().delete(*args, **kwargs)

    def _bill_finalized(self) -> bool:
        return Bill.objects.filter(pk=self.bill_id, state=Bill.State.FINALIZED).exists()


class Adjustment(models.Model):
    """A correction (credit < 0, charge > 0) for a project, applied to the next open month's bill."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="billing_adjustments")
    month = models.DateField(help_text=_("the open billing month it is applied to"))
    amount = models.DecimalField(_("amount"), max_digits=14, decimal_places=2)
    cu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    currency = models.CharField(max_length=3, default="CNY")
    reason = models.CharField(_("reason"), max_length=500)
    corrects_bill = models.ForeignKey(
        Bill, null=True, blank=True, on_delete=models.PROTECT, related_name="corrections"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(amount=0), name="billing_adjustment_amount_not_zero"),
            models.CheckConstraint(condition=Q(month__day=1), name="billing_adjustment_month_first_day"),
            models.CheckConstraint(condition=~Q(reason=""), name="billing_adjustment_reason_required"),
        ]
        verbose_name = _("adjustment")

    def __str__(self) -> str:
        return f"{self.project.slug} {self.month:%Y-%m}: {self.amount} ({self.reason[:40]})"


def month_start(value: date) -> date:
    return value.replace(day=1)


class _CostSums(models.Model):
    """The ledger's sums over one key of a cost summary (its project's amount, CU-hours and entries)."""

    project = models.ForeignKey(Project, db_index=False, **_COPIED_KEY | {"related_name": "+"})
    amount = models.DecimalField(max_digits=24, decimal_places=6, default=Decimal(0))
    cu_hours = models.DecimalField(max_digits=24, decimal_places=6, default=Decimal(0))
    entries = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class JobCostSummary(_CostSums):
    """The ledger summed per job, billing month and project (issue 31 §3): what the job-cost page of a
    month reads instead of aggregating every entry; ``JobCostTotal`` sums it over the months (the
    job-cost page of every month), ``ProjectCostSummary`` over the jobs (the bills page's cost per month).

    Kept in the database, exactly, by the ledger itself (migration 0007): on PostgreSQL a statement
    trigger adds the rows each INSERT or COPY into ``billing_usageentry`` really wrote (its transition
    table: slices skipped by ON CONFLICT DO NOTHING are not in it), grouped per key, upserted in the
    same transaction (a failed metering run rolls it back with its entries); TRUNCATE of the ledger
    empties all three. On SQLite (the demo) a row trigger does the same per entry. The ledger is
    append-only (UPDATE and DELETE are refused), so inserts are the only changes there are to follow.
    Adjustments are per project and month, never per job: they are not part of it (nor of the page
    before it)."""

    job = models.ForeignKey(Job, db_index=False, **_COPIED_KEY | {"related_name": "cost_summaries"})
    month = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "month", "project"], name="billing_jobcost_one_per_key"),
        ]
        indexes = [
            # A month's page in the page's order (dearest first), without sorting the month's jobs.
            models.Index(fields=["month", "-amount", "job"], name="billing_jobcost_month_amt_idx"),
        ]
        verbose_name = _("job cost summary")
        verbose_name_plural = _("job cost summaries")

    def __str__(self) -> str:
        return f"job {self.job_id} {self.month:%Y-%m}: {self.amount}"


class JobCostTotal(_CostSums):
    """``JobCostSummary`` summed over the months, per job and project: the job-cost page of every month
    (its default), kept by the same triggers."""

    job = models.ForeignKey(Job, db_index=False, **_COPIED_KEY | {"related_name": "cost_totals"})

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "project"], name="billing_jobcosttotal_one_per_key"),
        ]
        indexes = [models.Index(fields=["-amount", "job"], name="billing_jobcosttotal_amt_idx")]
        verbose_name = _("job cost total")
        verbose_name_plural = _("job cost totals")

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.amount}"


class ProjectCostSummary(_CostSums):
    """``JobCostSummary`` summed over the jobs, per billing month and project: the bills page's cost per
    month, kept by the same triggers."""

    month = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["month", "project"], name="billing_projectcost_one_per_key"),
        ]
        verbose_name = _("project cost summary")
        verbose_name_plural = _("project cost summaries")

    def __str__(self) -> str:
        return f"project {self.project_id} {self.month:%Y-%m}: {self.amount}"
