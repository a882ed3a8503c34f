"""Admin of what the ledger keeps: its events, the node reports, and the agent tokens."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from apps.accounts.admin_keys import OneTimeKeyAdminMixin
from apps.core.admin import ReadOnlyAdminMixin
from apps.core.audit import change_record_create, snapshot
from apps.inventory.models import (
    AgentToken,
    DeviceEvent,
    NodeReport,
)
from apps.inventory.services import tokens

# --------------------------------------------------------------------------------------------------
# history, reports, agent tokens


@admin.register(DeviceEvent)
class DeviceEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "node", "device", "kind", "severity", "message", "actor_label")
    list_filter = ("kind", "severity", "node__cluster")
    list_select_related = ("node", "device", "device__node")
    search_fields = ("message", "node__name", "device__uuid", "actor_label")
    date_hierarchy = "created_at"


@admin.register(NodeReport)
class NodeReportAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("received_at", "node", "kind", "size_bytes", "actor_label")
    list_filter = ("kind", "node__cluster")
    list_select_related = ("node",)
    search_fields = ("node__name", "sha256")
    date_hierarchy = "received_at"

    def get_changelist(self, request, **kwargs):
        # The list never shows the raw text (up to megabytes per report); the change page does.
        base = super().get_changelist(request, **kwargs)

        class ChangeList(base):
            def get_queryset(self, request, exclude_parameters=None):
                return super().get_queryset(request, exclude_parameters).defer("raw_text")

        return ChangeList

    def get_fields(self, request, obj=None):
        return [f.name for f in NodeReport._meta.fields if f.name not in ("id", "raw_text")] + [
            "raw_text_display"
        ]

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)

    @admin.display(description=_("raw text"))
    def raw_text_display(self, obj: NodeReport) -> str:
        return format_html(
            '<pre style="white-space: pre; overflow: auto; max-height: 40em">{}</pre>', obj.raw_text
        )


@admin.register(AgentToken)
class AgentTokenAdmin(OneTimeKeyAdminMixin, admin.ModelAdmin):
    """Node-agent tokens. The key is shown once when the token is created; only its SHA-256 is stored."""

    list_display = ("name", "cluster", "node_pattern", "prefix", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked", "cluster")
    list_select_related = ("cluster",)
    search_fields = ("name", "prefix")
    actions = ("revoke",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["cluster", "name", "node_pattern"]
        return ["cluster", "name", "node_pattern", "prefix", "revoked", "created_at", "last_used_at"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["cluster", "prefix", "created_at", "last_used_at"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: the audit trail keeps pointing at the token

    def save_model(self, request, obj, form, change):
        if change:
            changed = [name for name in form.changed_data if name in ("name", "node_pattern", "revoked")]
            before = snapshot(AgentToken.objects.get(pk=obj.pk), changed)
            super().save_model(request, obj, form, change)
            if changed:
                change_record_create(
                    actor=request.user,
                    action="agent_token.update",
                    obj=obj,
                    before=before,
                    after=snapshot(obj, changed),
                )
            return
        token, key = tokens.agent_token_create(
            cluster=obj.cluster, name=obj.name, node_pattern=obj.node_pattern, actor=request.user
        )
        obj.pk, obj.prefix, obj.key_hash = token.pk, token.prefix, token.key_hash
        self.show_key_once(request, key)

    @admin.action(description=_("Revoke selected tokens"), permissions=["change"])
    def revoke(self, request, queryset):
        count = 0
        for token in queryset.filter(revoked=False):
            count += tokens.agent_token_revoke(token=token, actor=request.user)
        self.message_user(request, f"Revoked: {count}", messages.SUCCESS)
