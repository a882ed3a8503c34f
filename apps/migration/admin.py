"""Admin console: plans with their phases and gates (written through services); services, actions and
measurements are read here and steered from the cockpit or the API (their writes scale Deployments)."""

from django.contrib import admin

from apps.core.admin import ReadOnlyAdminMixin
from apps.migration import services
from apps.migration.models import (
    AccuracyEval,
    Gate,
    MigratedService,
    MigrationAction,
    MigrationPlan,
    PlanPhase,
    ServiceMetric,
)


class PlanPhaseInline(admin.TabularInline):
    model = PlanPhase
    extra = 0
    fields = ["phase", "target_start", "target_end", "owner", "notes"]


class GateInline(admin.TabularInline):
    model = Gate
    extra = 0
    fields = ["phase", "kind", "threshold", "window_days", "metric"]


@admin.register(MigrationPlan)
class MigrationPlanAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "source_vendors",
        "target_vendors",
        "validate_max_target_weight",
        "fallback_cards",
    ]
    search_fields = ["name"]
    inlines = [PlanPhaseInline, GateInline]
    exclude = ["created_by"]

    def save_model(self, request, obj, form, change):
        fields = {k: form.cleaned_data[k] for k in form.cleaned_data if k not in ("id",)}
        if change:
            services.plan_update(plan=obj, actor=request.user, **fields)
        else:
            created = services.plan_create(actor=request.user, **fields)
            obj.pk = created.pk
            obj._state.adding = False

    def save_formset(self, request, form, formset, change):
        for obj in formset.deleted_objects:
            services.object_delete(obj=obj, actor=request.user)
        for obj in formset.save(commit=False):
            obj.plan = form.instance
            if isinstance(obj, PlanPhase):
                services.plan_phase_save(phase=obj, actor=request.user)
            else:
                services.gate_save(gate=obj, actor=request.user)


@admin.register(MigratedService)
class MigratedServiceAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "plan",
        "project",
        "phase",
        "source_vendor",
        "source_weight",
        "target_vendor",
        "target_weight",
        "gate_status",
    ]
    list_filter = ["plan", "phase", "gate_status", "target_vendor"]
    search_fields = ["name"]
    raw_id_fields = ["source_job", "target_job"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(MigrationAction)
class MigrationActionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "created_at",
        "service",
        "kind",
        "actor_label",
        "from_phase",
        "to_phase",
        "to_target_weight",
    ]
    list_filter = ["kind"]
    date_hierarchy = "created_at"


@admin.register(ServiceMetric)
class ServiceMetricAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["service", "track", "window_start", "requests", "errors", "p99_latency_ms", "source"]
    list_filter = ["track"]
    date_hierarchy = "window_start"


@admin.register(AccuracyEval)
class AccuracyEvalAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["service", "track", "metric", "value", "dataset", "source", "measured_at"]
    list_filter = ["track", "metric"]
