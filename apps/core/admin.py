from django.contrib import admin

from apps.core.models import ChangeRecord


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
