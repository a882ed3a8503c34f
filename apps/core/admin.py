from django.contrib import admin

from apps.core.models import BackgroundRun, ChangeRecord


@admin.register(ChangeRecord)
class ChangeRecordAdmin(admin.ModelAdmin):
    list_display = ("created_at", "actor_label", "action", "object_repr", "task_id")
    list_filter = ("action", "content_type")
    search_fields = ("object_repr", "object_id", "actor_label", "task_id")
    readonly_fields = [f.name for f in ChangeRecord._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BackgroundRun)
class BackgroundRunAdmin(admin.ModelAdmin):
    """Read-only: runs change only through apps.core.runs (their owners' services)."""

    list_display = (
        "created_at",
        "kind",
        "status",
        "progress_done",
        "progress_total",
        "actor_label",
        "finished_at",
    )
    list_filter = ("kind", "status")
    search_fields = ("kind", "actor_label", "error")
    # params can hold a whole uploaded file (a ledger CSV): not shown in the admin.
    exclude = ("params",)
    readonly_fields = [f.name for f in BackgroundRun._meta.fields if f.name != "params"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
