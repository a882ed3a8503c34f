from django.contrib import admin

from apps.accounts import services
from apps.accounts.admin_keys import OneTimeKeyAdminMixin
from apps.accounts.models import ApiToken, Department, Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Department)
class DepartmentAdmin(admin.ModelAdmin):
    list_display = ("name", "slug")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "department", "namespace", "is_active")
    list_filter = ("department", "is_active")
    list_select_related = ("department",)
    search_fields = ("name", "slug", "namespace")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]


@admin.register(ApiToken)
class ApiTokenAdmin(OneTimeKeyAdminMixin, admin.ModelAdmin):
    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "expires_at", "revoked")
    list_filter = ("revoked",)
    search_fields = ("name", "user__username", "prefix")
    list_select_related = ("user",)
    fields = ("user", "name", "expires_at", "prefix", "last_used_at", "revoked")
    readonly_fields = ("prefix", "last_used_at", "revoked")
    autocomplete_fields = ["user"]
    actions = ["revoke"]

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        token, key = services.api_token_create(
            user=obj.user, name=obj.name, expires_at=obj.expires_at, actor=request.user
        )
        obj.pk = token.pk
        obj.prefix = token.prefix
        self.show_key_once(request, key)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            services.api_token_revoke(token=token, actor=request.user)
