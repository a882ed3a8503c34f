"""What the ledger's admin pages share: the reason and import forms, the action helpers, and the
read-only inlines of events and cards."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from apps.core.admin import ReadOnlyAdminMixin, run_each
from apps.inventory.models import (
    Device,
    DeviceEvent,
)

EVENT_HISTORY_LIMIT = 50
IMPORT_MAX_BYTES = 10 * 1024 * 1024
NODE_EDITABLE_FIELDS = ("pool", "zone", "rack", "switch", "labels", "notes")


# --------------------------------------------------------------------------------------------------
# forms and shared helpers


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        max_length=300,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("Recorded in the ledger history and the audit trail."),
    )


class LedgerImportForm(forms.Form):
    file = forms.FileField(label=_("Ledger CSV file"))
    dry_run = forms.BooleanField(
        label=_("Dry run"), required=False, help_text=_("Validate and show what would change; write nothing.")
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload.size > IMPORT_MAX_BYTES:
            raise forms.ValidationError(
                _("The file is larger than %(mb)d MB.") % {"mb": IMPORT_MAX_BYTES // 2**20}
            )
        return upload


def _page_context(modeladmin: admin.ModelAdmin, request: HttpRequest, title: str, **extra: Any) -> dict:
    """The context of an admin page of our own (an action's confirmation, the import)."""
    return {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "subtitle": None,
        "opts": modeladmin.opts,
        **extra,
    }


def _each_action(*, description: str, done: str):
    """Decorator: make ``call(self, obj, actor)`` an admin action (change permission) that calls it
    once per selected row."""

    def decorate(call: Callable[..., Any]):
        @admin.action(description=description, permissions=["change"])
        @functools.wraps(call)
        def action(modeladmin, request, queryset):
            run_each(modeladmin, request, queryset, lambda obj: call(modeladmin, obj, request.user), done)

        return action

    return decorate


def _reason_action(*, description: str, title: str, done: str):
    """Decorator: make ``call(self, obj, reason, actor)`` an admin action (change permission) that
    asks for a reason on an intermediate page titled ``title``, then calls it once per selected row."""

    def decorate(call: Callable[..., Any]):
        @admin.action(description=description, permissions=["change"])
        @functools.wraps(call)
        def action(modeladmin, request, queryset):
            form = ReasonForm(request.POST if "apply" in request.POST else None)
            if form.is_bound and form.is_valid():
                reason = form.cleaned_data["reason"]
                run_each(
                    modeladmin,
                    request,
                    queryset,
                    lambda obj: call(modeladmin, obj, reason, request.user),
                    done,
                )
                return None
            context = _page_context(
                modeladmin,
                request,
                title,
                objects=list(queryset),
                form=form,
                action=call.__name__,
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
                media=modeladmin.media,
            )
            return TemplateResponse(request, "admin/inventory/action_reason.html", context)

        return action

    return decorate


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


# --------------------------------------------------------------------------------------------------
# inlines


class LatestEventsFormSet(BaseInlineFormSet):
    """Only the newest events: a long history would make the change page slow."""

    def get_queryset(self):
        if not hasattr(self, "_latest"):
            self._latest = super().get_queryset()[:EVENT_HISTORY_LIMIT]
        return self._latest


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    extra = 0
    max_num = 0
    can_delete = False


class EventHistoryInline(ReadOnlyInline):
    model = DeviceEvent
    formset = LatestEventsFormSet
    verbose_name = _("history event")
    verbose_name_plural = _("history (latest events)")
    fields = ("created_at", "kind", "severity", "message", "change", "actor_label")
    readonly_fields = fields
    ordering = ("-created_at", "-id")

    @admin.display(description=_("before → after"))
    def change(self, obj: DeviceEvent) -> str:
        if obj.before is None and obj.after is None:
            return ""
        return format_html("<code>{}</code> → <code>{}</code>", _json(obj.before), _json(obj.after))


class NodeEventHistoryInline(EventHistoryInline):
    fk_name = "node"
    fields = ("created_at", "kind", "severity", "device", "message", "change", "actor_label")
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("device", "device__node")


class DeviceEventHistoryInline(EventHistoryInline):
    fk_name = "device"


class NodeDeviceInline(ReadOnlyInline):
    model = Device
    fk_name = "node"
    show_change_link = True
    fields = (
        "vendor",
        "index",
        "model_label",
        "uuid",
        "serial",
        "pci_bus_id",
        "health",
        "pool_status",
        "owner_project",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("node", "device_model", "owner_project")

    @admin.display(description=_("model"))
    def model_label(self, obj: Device) -> str:
        return obj.model_label
