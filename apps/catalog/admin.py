"""Admin for the device catalog.

Device models are loaded from apps/catalog/data/device_models.yaml (``manage.py load_catalog``), so
they are read-only here: an edit would be overwritten by the next sync. Coefficients are versioned:
the admin adds a new row (through compute_coefficient_set) instead of changing or deleting one.
"""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from apps.catalog import selectors, services
from apps.catalog.models import ComputeCoefficient, DeviceModel
from apps.core.errors import ApplicationError


class ComputeCoefficientInline(admin.TabularInline):
    model = ComputeCoefficient
    fields = ("effective_from", "value", "basis", "reason", "created_by", "created_at")
    readonly_fields = fields
    ordering = ("-effective_from",)
    extra = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("created_by")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(DeviceModel)
class DeviceModelAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "vendor",
        "kind",
        "memory_display",
        "fp16_dense_tflops",
        "bf16_dense_tflops",
        "confidence",
        "coefficient_display",
        "is_builtin",
    )
    list_filter = ("vendor", "kind", "confidence", "is_builtin")
    search_fields = ("name", "slug", "product_names")
    ordering = ("vendor", "name")
    inlines = [ComputeCoefficientInline]

    def get_queryset(self, request):
        # The coefficient in force today rides along as an annotation: one query for the whole page.
        return selectors.device_model_list()

    @admin.display(description="memory (GiB)", ordering="memory_mib")
    def memory_display(self, obj):
        return obj.memory_gib if obj.memory_mib is not None else "—"

    @admin.display(description="coefficient today", ordering="current_coefficient")
    def coefficient_display(self, obj):
        value = getattr(obj, "current_coefficient", None)
        return value.quantize(Decimal("0.0001")) if value is not None else "—"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ComputeCoefficientForm(forms.ModelForm):
    class Meta:
        model = ComputeCoefficient
        fields = ("device_model", "value", "effective_from", "basis", "reason")

    def clean(self):
        cleaned = super().clean()
        model = cleaned.get("device_model")
        if model is None or cleaned.get("value") is None or cleaned.get("effective_from") is None:
            return cleaned
        try:
            services.compute_coefficient_check(
                device_model=model,
                value=cleaned["value"],
                effective_from=cleaned["effective_from"],
                basis=cleaned.get("basis") or "",
                reason=cleaned.get("reason") or "",
            )
        except ApplicationError as exc:
            fields = exc.details if isinstance(exc.details, dict) else {}
            field = next((f for f in fields if f in self.fields), None)
            raise ValidationError({field: exc.message} if field else exc.message)
        return cleaned


@admin.register(ComputeCoefficient)
class ComputeCoefficientAdmin(admin.ModelAdmin):
    form = ComputeCoefficientForm
    list_display = ("device_model", "value", "effective_from", "basis", "reason", "created_by", "created_at")
    list_filter = ("basis", "device_model__vendor")
    search_fields = ("device_model__name", "reason")
    autocomplete_fields = ("device_model",)
    list_select_related = ("device_model", "created_by")
    date_hierarchy = "effective_from"

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return ("device_model", "value", "effective_from", "basis", "reason", "created_by", "created_at")
        return ()

    def save_model(self, request, obj, form, change):
        if change:  # pragma: no cover - change permission is refused below
            raise PermissionError("compute coefficients are versioned: add a new one instead")
        created = services.compute_coefficient_set(
            device_model=obj.device_model,
            value=obj.value,
            effective_from=obj.effective_from,
            basis=obj.basis,
            reason=obj.reason,
            actor=request.user,
        )
        # Hand the saved row back to the admin (log entry, redirect).
        obj.pk = created.pk
        obj.created_by = created.created_by
        obj.created_at = created.created_at
        obj.updated_at = created.updated_at
        obj._state.adding = False
        obj._state.db = created._state.db

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
