"""Admin console for quotas (staff only). Saves and deletes go through ``apps.quotas.services`` so the
department bound is checked under a lock, the change is audited and the ResourceQuota is pushed."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from apps.core.errors import ApplicationError
from apps.quotas import services
from apps.quotas.models import Quota


class QuotaAdminForm(forms.ModelForm):
    class Meta:
        model = Quota
        fields = services.FIELDS

    def _post_clean(self):
        super()._post_clean()  # builds the instance and runs the model validation
        if self.errors:
            return
        try:
            services._check_department_bound(self.instance)
        except ApplicationError as exc:
            for name, messages_ in (exc.details or {None: [exc.message]}).items():
                self.add_error(name if name in self.fields else None, messages_)


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    form = QuotaAdminForm
    list_display = (
        "__str__",
        "department",
        "project",
        "resource_class",
        "guaranteed_cu",
        "borrowing_limit_cu",
        "lending_limit_cu",
        "over_quota_weight",
    )
    list_filter = ("resource_class", "department", "project__department")
    list_select_related = ("department", "project", "project__department", "device_model", "pool")
    search_fields = ("project__slug", "department__slug")

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        # The owner and the class are fixed once created (delete and create another to change them).
        return services.FIELDS[: len(services.FIELDS) - len(services.UPDATABLE)] if obj else ()

    def save_model(self, request: HttpRequest, obj: Quota, form, change: bool) -> None:
        values = {name: form.cleaned_data.get(name) for name in services.FIELDS}
        if change:
            services.quota_update(
                quota=obj, actor=request.user, **{k: v for k, v in values.items() if k in services.UPDATABLE}
            )
        else:
            created = services.quota_create(actor=request.user, **values)
            obj.pk = created.pk

    def delete_model(self, request: HttpRequest, obj: Quota) -> None:
        try:
            services.quota_delete(quota=obj, actor=request.user)
        except ApplicationError as exc:
            messages.error(request, exc.message)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for quota in queryset:
            self.delete_model(request, quota)
