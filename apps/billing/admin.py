"""Admin console for billing (staff only). Ledger rows and bills are read-only here: bills are made
by month close and never edited (finalized ones refuse even below the admin); rate cards and
adjustments are written through apps.billing.services; "close month" starts a close on the billing
worker and shows its progress."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from apps.billing import services
from apps.billing.models import (
    Adjustment,
    Bill,
    BillingPeriod,
    BillLine,
    RateCard,
    RateCardDiscount,
    UsageEntry,
)
from apps.core.admin import ReadOnlyAdminMixin
from apps.core.errors import ApplicationError


@admin.register(UsageEntry)
class UsageEntryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "slice_start",
        "month",
        "project",
        "job",
        "device_model",
        "template",
        "cu_hours",
        "unit_price",
        "amount",
        "late",
    )
    list_filter = ("month", "late", "basis", "project", "device_model")
    search_fields = ("job__name", "project__slug", "project__name", "allocation__id")
    list_select_related = ("project", "job", "device_model", "template")
    date_hierarchy = "slice_start"
    show_full_result_count = False


class BillLineInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = BillLine
    extra = 0
    can_delete = False
    fields = ("group", "position", "label", "cu_hours", "amount")
    readonly_fields = fields
    ordering = ("group", "position")


@admin.register(Bill)
class BillAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "project",
        "month",
        "state",
        "used_cu_hours",
        "usage_amount",
        "adjustments_amount",
        "idle_share_amount",
        "total",
    )
    list_filter = ("state", "month", "project")
    search_fields = ("project__slug", "project__name")
    list_select_related = ("project",)
    inlines = (BillLineInline,)
    actions = ("finalize",)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return bool(request.user.is_staff)

    @admin.action(description=_("Finalize the selected draft bills"))
    def finalize(self, request: HttpRequest, queryset):
        done = 0
        for bill in queryset.filter(state=Bill.State.DRAFT):
            services.bill_finalize(bill=bill, actor=request.user)
            done += 1
        self.message_user(request, _("%(n)d bill(s) finalized.") % {"n": done}, messages.SUCCESS)


class RateCardDiscountInline(admin.TabularInline):
    model = RateCardDiscount
    extra = 0


class RateCardAdminForm(forms.ModelForm):
    class Meta:
        model = RateCard
        fields = services.RATE_CARD_FIELDS

    def clean(self):
        data = super().clean()
        if not self.errors:
            candidate = RateCard(
                pk=self.instance.pk, **{k: v for k, v in data.items() if k in self.Meta.fields}
            )
            clash = services.rate_card_overlaps(candidate)
            if clash is not None:
                raise ValidationError(
                    _("Overlaps rate card %(name)s (same scope, from %(start)s).")
                    % {"name": clash.name, "start": clash.effective_from}
                )
        return data


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    form = RateCardAdminForm
    list_display = (
        "name",
        "scope",
        "target",
        "price_per_cu_hour",
        "currency",
        "effective_from",
        "effective_to",
    )
    list_filter = ("scope", "currency")
    search_fields = ("name",)
    inlines = (RateCardDiscountInline,)

    def save_model(self, request, obj, form, change):
        fields = {
            name: form.cleaned_data[name] for name in services.RATE_CARD_FIELDS if name in form.cleaned_data
        }
        try:
            if change:
                saved = services.rate_card_update(card=obj, actor=request.user, **fields)
            else:
                saved = services.rate_card_create(actor=request.user, **fields)
        except ApplicationError as exc:
            raise ValidationError(exc.message)
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        services.rate_card_delete(card=obj, actor=request.user)


@admin.register(Adjustment)
class AdjustmentAdmin(admin.ModelAdmin):
    list_display = ("created_at", "project", "month", "amount", "reason", "corrects_bill", "actor_label")
    list_filter = ("month", "project")
    search_fields = ("reason", "project__slug")
    fields = ("project", "amount", "cu_hours", "reason", "corrects_bill")
    raw_id_fields = ("corrects_bill",)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return obj is None

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        saved = services.adjustment_create(
            project=data["project"],
            amount=data["amount"],
            cu_hours=data.get("cu_hours") or 0,
            reason=data["reason"],
            corrects_bill=data.get("corrects_bill"),
            actor=request.user,
        )
        obj.pk = saved.pk


@admin.register(BillingPeriod)
class BillingPeriodAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "month",
        "state",
        "progress",
        "idle_policy",
        "idle_cost",
        "platform_cost",
        "closed_at",
        "closed_by",
    )
    list_filter = ("state",)
    list_select_related = ("close_run",)  # the progress column
    actions = ("close_months",)

    @admin.display(description=_("progress"))
    def progress(self, obj: BillingPeriod) -> str:
        return f"{obj.progress_percent} % ({obj.progress_done}/{obj.progress_total})"

    @admin.action(description=_("Close the selected months (billing worker; shows progress)"))
    def close_months(self, request: HttpRequest, queryset):
        started = []
        for period in queryset.order_by("month"):
            try:
                with transaction.atomic():
                    period = services.month_close_start(month=period.month, actor=request.user)
                    if period.state != BillingPeriod.State.CLOSED:
                        services.month_close_enqueue(period=period)
                        started.append(period)
            except ApplicationError as exc:
                self.message_user(request, f"{period}: {exc.message}", messages.ERROR)
        if len(started) == 1:
            return HttpResponseRedirect(reverse("billing:period-progress", args=[started[0].pk]))
        if started:
            self.message_user(
                request,
                _("Closing %(months)s.") % {"months": ", ".join(str(p) for p in started)},
                messages.SUCCESS,
            )
        return None
