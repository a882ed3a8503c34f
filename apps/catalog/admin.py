"""Admin for the device catalog.

Device models are loaded from apps/catalog/data/device_models.yaml (``manage.py load_catalog``), so
they are read-only here: an edit would be overwritten by the next sync. Coefficients are versioned:
the admin adds a new row (through compute_coefficient_set) instead of changing or deleting one.
Compute templates: custom ones are created / changed / deleted through the services, built-in ones
are view-only; every change view shows the YAML description. Request templates are added by
importing a YAML document and changed by importing it again.
"""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from apps.catalog import selectors, services
from apps.catalog.filtersets import filter_by_partition
from apps.catalog.models import (
    ComputeCoefficient,
    ComputeTemplate,
    DeviceModel,
    DeviceRequestTemplate,
    WorkloadProfile,
)
from apps.core.admin import ReadOnlyAdminMixin
from apps.core.errors import ApplicationError


class ComputeCoefficientInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = ComputeCoefficient
    fields = ("effective_from", "value", "basis", "reason", "created_by", "created_at")
    readonly_fields = fields
    ordering = ("-effective_from",)
    extra = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("created_by")


@admin.register(DeviceModel)
class DeviceModelAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
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


# ------------------------------------------------------------------ compute templates


class PartitionListFilter(admin.SimpleListFilter):
    title = _("partition")
    parameter_name = "partition"

    def lookups(self, request, model_admin):
        return [
            ("mig", "MIG"),
            ("vnpu", "vNPU"),
            ("amd-partition", "AMD partition"),
            ("none", _("soft slice")),
        ]

    def queryset(self, request, queryset):
        if self.value() in ("mig", "vnpu", "amd-partition", "none"):
            return filter_by_partition(queryset, self.value())
        return queryset


class ComputeTemplateAdminForm(forms.ModelForm):
    """Model validation (ComputeTemplate.clean) runs on the form; the save goes through the services."""

    class Meta:
        model = ComputeTemplate
        fields = (
            "device_model",
            "name",
            "slug",
            "memory_mib",
            "compute_share",
            "isolation",
            "partition_profile",
            "max_instances",
            "description",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "slug" in self.fields:
            self.fields["slug"].required = False
            self.fields["slug"].help_text = _("left empty: made from the model and the name")


def _yaml_block(template: ComputeTemplate) -> str:
    document = selectors.template_describe(template)
    return format_html(
        '<pre style="white-space: pre; margin: 0">{}</pre>', selectors.template_render(document)
    )


@admin.register(ComputeTemplate)
class ComputeTemplateAdmin(admin.ModelAdmin):
    form = ComputeTemplateAdminForm
    list_display = (
        "name",
        "device_model",
        "memory_display",
        "share_display",
        "isolation",
        "partition_profile",
        "max_instances",
        "compute_units_display",
        "is_builtin",
        "is_retired",
    )
    list_filter = (
        "device_model__vendor",
        "isolation",
        PartitionListFilter,
        "is_builtin",
        "is_retired",
        ("device_model", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("name", "slug", "device_model__name", "partition_profile")
    list_select_related = ("device_model",)
    autocomplete_fields = ("device_model",)
    actions = ["retire_selected"]
    readonly_fields = ("yaml_preview", "is_builtin", "is_retired", "created_by", "created_at", "updated_at")

    def get_queryset(self, request):
        # Today's coefficient rides along: one query for the whole list.
        return selectors.compute_template_list()

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # deletes go through the service, one at a time
        return actions

    def get_fields(self, request, obj=None):
        fields = list(ComputeTemplateAdminForm.Meta.fields)
        if obj is not None:
            fields += ["is_builtin", "is_retired", "yaml_preview", "created_by", "created_at", "updated_at"]
        return fields

    @admin.display(description=_("memory (GiB)"), ordering="memory_mib")
    def memory_display(self, obj):
        return obj.memory_gib

    @admin.display(description=_("compute share (%)"), ordering="compute_share")
    def share_display(self, obj):
        return obj.compute_share

    @admin.display(description=_("compute units"))
    def compute_units_display(self, obj):
        value = obj.compute_units(getattr(obj, "current_coefficient", None))
        return "—" if value is None else value

    @admin.display(description=_("YAML description"))
    def yaml_preview(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        return _yaml_block(obj)

    def has_change_permission(self, request, obj=None):
        if obj is not None and (obj.is_builtin or obj.is_retired):
            return False  # generated from the catalog / retired: view only
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.is_builtin:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        values = {name: form.cleaned_data.get(name) for name in ComputeTemplateAdminForm.Meta.fields}
        try:
            if change:
                saved = services.compute_template_update(
                    template=ComputeTemplate.objects.get(pk=obj.pk), actor=request.user, **values
                )
            else:
                saved = services.compute_template_create(actor=request.user, **values)
        except ApplicationError as exc:  # a race with another writer: show it, do not 500
            raise ValidationError(exc.message)
        obj.pk = saved.pk
        obj.slug = saved.slug
        obj.created_at = saved.created_at
        obj.updated_at = saved.updated_at
        obj._state.adding = False
        obj._state.db = saved._state.db

    def delete_model(self, request, obj):
        services.compute_template_delete(template=obj, actor=request.user)

    @admin.action(description=_("Retire the selected templates"))
    def retire_selected(self, request, queryset):
        count = 0
        for template in queryset.filter(is_retired=False):
            services.compute_template_retire(template=template, actor=request.user, reason="admin action")
            count += 1
        self.message_user(request, _("%(count)s templates retired.") % {"count": count})


# ------------------------------------------------------------------ request templates


class RequestTemplateImportAdminForm(forms.ModelForm):
    """Add = import a YAML document through request_template_import."""

    document = forms.CharField(
        label=_("YAML document"),
        widget=forms.Textarea(attrs={"rows": 20, "cols": 90, "style": "font-family: monospace"}),
        help_text=_("kind DeviceRequestTemplate; the same metadata.name again replaces that template"),
    )

    class Meta:
        model = DeviceRequestTemplate
        fields = ()

    def clean_document(self):
        text = self.cleaned_data["document"]
        try:
            services.request_template_check(text=text)
        except ApplicationError as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            problems = [
                f"{path}: {message}"
                for path, messages in details.items()
                if isinstance(messages, list)
                for message in messages
            ]
            raise ValidationError(problems or [exc.message])
        return text


@admin.register(DeviceRequestTemplate)
class DeviceRequestTemplateAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "api_version",
        "devices_display",
        "placement_display",
        "warning_count",
        "updated_at",
    )
    list_filter = ("api_version",)
    search_fields = ("name",)
    readonly_fields = (
        "name",
        "slug",
        "api_version",
        "metadata",
        "spec",
        "resolution",
        "warnings_display",
        "yaml_preview",
        "created_by",
        "created_at",
        "updated_at",
    )

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = RequestTemplateImportAdminForm
            kwargs["fields"] = ["document"]
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["document"]
        return list(self.readonly_fields)

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description=_("devices"))
    def devices_display(self, obj):
        return ", ".join(
            f"{d.get('count')} × {d.get('type')}{' ' + d['model'] if d.get('model') else ''}"
            for d in obj.devices
        )

    @admin.display(description=_("placement"))
    def placement_display(self, obj):
        policy = obj.topology_policy
        return policy.get("placement", "any") + (
            f" → {policy['preferred']}" if policy.get("preferred") else ""
        )

    @admin.display(description=_("warnings"))
    def warning_count(self, obj):
        return len(obj.warnings or [])

    @admin.display(description=_("warnings"))
    def warnings_display(self, obj):
        if not obj.warnings:
            return "—"
        return format_html_join("", "<p>{}</p>", ((w,) for w in obj.warnings))

    @admin.display(description=_("YAML"))
    def yaml_preview(self, obj):
        return format_html(
            '<pre style="white-space: pre; margin: 0">{}</pre>', services.request_template_export(obj)
        )

    def has_change_permission(self, request, obj=None):
        return False  # re-import to change

    def save_model(self, request, obj, form, change):
        template, warnings = services.request_template_import(
            text=form.cleaned_data["document"], actor=request.user
        )
        for warning in warnings:
            self.message_user(request, warning, level=messages.WARNING)
        obj.pk = template.pk
        obj.name = template.name
        obj._state.adding = False
        obj._state.db = template._state.db

    def delete_model(self, request, obj):
        services.request_template_delete(template=obj, actor=request.user)


@admin.register(WorkloadProfile)
class WorkloadProfileAdmin(admin.ModelAdmin):
    """Profiles are data: staff edit them here; the built-in ones come from workload-profiles.yaml."""

    list_display = [
        "key",
        "name",
        "unit",
        "framework",
        "precision",
        "memory_mib",
        "latency_bound",
        "is_builtin",
    ]
    list_filter = ["latency_bound", "is_builtin"]
    search_fields = ["key", "name"]
    readonly_fields = ["is_builtin", "created_at", "updated_at"]
