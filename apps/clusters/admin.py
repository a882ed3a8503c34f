"""Cluster admin actions that need the clusters app (the ledger's admin sits a layer below):
"Test connection" and "Sync now" on the inventory Cluster admin, and its connection state read-only."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _

from apps.clusters.backends.errors import BackendError
from apps.clusters.connect import cluster_connection_test
from apps.clusters.models import ClusterPreference
from apps.clusters.sync import cluster_sync
from apps.core.errors import ApplicationError
from apps.inventory.admin import ClusterAdmin
from apps.inventory.models import Cluster


class ClusterPreferenceInline(admin.StackedInline):
    """The cluster's dispatch order for the engine (lower first; a job never spans clusters)."""

    model = ClusterPreference
    extra = 0
    max_num = 1
    can_delete = True


class ClusterConnectionAdmin(ClusterAdmin):
    inlines = [*getattr(ClusterAdmin, "inlines", ()), ClusterPreferenceInline]
    readonly_fields = (
        *getattr(ClusterAdmin, "readonly_fields", ()),
        "last_checked_at",
        "last_check",
        "last_synced_at",
        "last_sync",
    )
    actions = [*(getattr(ClusterAdmin, "actions", None) or []), "test_connection", "sync_now"]

    @admin.action(description=_("Test connection"))
    def test_connection(self, request, queryset):
        for cluster in queryset.order_by("pk"):
            result = cluster_connection_test(cluster=cluster, actor=request.user)
            level = messages.SUCCESS if result["ok"] else messages.WARNING
            self.message_user(request, f"{cluster.slug}: " + " ".join(result["lines"]), level)

    @admin.action(description=_("Sync now"))
    def sync_now(self, request, queryset):
        for cluster in queryset.order_by("pk"):
            try:
                report = cluster_sync(cluster=cluster, actor=request.user)
            except (ApplicationError, BackendError) as e:
                self.message_user(request, f"{cluster.slug}: {e.message}", messages.ERROR)
            else:
                self.message_user(request, f"{cluster.slug}: {report.summary()}", messages.SUCCESS)


if admin.site.is_registered(Cluster):
    admin.site.unregister(Cluster)
admin.site.register(Cluster, ClusterConnectionAdmin)
