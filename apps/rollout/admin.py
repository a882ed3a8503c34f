"""Admin console for rollout (staff). Saves, deletes and stage changes go through
``apps.rollout.services`` so every change is validated, audited and pushed like the API's."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.core.admin import run_each
from apps.core.errors import ApplicationError
from apps.core.stored_text import localize, stored
from apps.rollout import services
from apps.rollout.models import (
    AutoscalePolicy,
    BenchmarkRun,
    GrayBatch,
    ScaleDecision,
    SoakCriteria,
    SoakResult,
    UpgradePlan,
    UpgradeWave,
)

# Stage reasons people read later, in their own language (apps.core.stored_text).
FAILED_BY = stored("failed from the admin console by %(user)s")
ROLLED_BACK_BY = stored("rolled back from the admin console by %(user)s")


class _ServiceSaveMixin:
    """Turn service refusals during save into a message instead of a server error."""

    def _guard(self, request, call) -> None:
        try:
            call()
        except ApplicationError as exc:
            messages.error(request, exc.message)


@admin.register(SoakCriteria)
class SoakCriteriaAdmin(_ServiceSaveMixin, admin.ModelAdmin):
    list_display = (
        "name",
        "min_days",
        "max_error_events",
        "max_temperature_c",
        "max_throughput_drop_pct",
        "max_lost_devices",
        "min_telemetry_coverage_pct",
    )
    search_fields = ("name",)

    def save_model(self, request, obj, form, change):
        values = {k: form.cleaned_data[k] for k in services.CRITERIA_FIELDS if k in form.cleaned_data}
        if change:
            self._guard(
                request, lambda: services.soak_criteria_update(criteria=obj, actor=request.user, **values)
            )
        else:
            obj.pk = services.soak_criteria_create(actor=request.user, **values).pk

    def delete_model(self, request, obj):
        self._guard(request, lambda: services.soak_criteria_delete(criteria=obj, actor=request.user))


class SoakResultInline(admin.TabularInline):
    model = SoakResult
    extra = 0
    can_delete = False
    fields = (
        "computed_at",
        "verdict",
        "soak_hours",
        "error_events",
        "lost_devices",
        "max_temperature_c",
        "telemetry_coverage_pct",
        "throughput_drop_pct",
        "missing",
        "violations",
    )
    readonly_fields = fields
    ordering = ("-computed_at",)

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(GrayBatch)
class GrayBatchAdmin(_ServiceSaveMixin, admin.ModelAdmin):
    list_display = ("name", "kind", "target_version", "stage", "soak_started_at", "criteria")
    list_filter = ("stage", "kind")
    search_fields = ("name", "slug", "target_version", "nodes__name")
    filter_horizontal = ("nodes",)
    list_select_related = ("criteria",)
    prepopulated_fields = {"slug": ("name",)}
    inlines = [SoakResultInline]
    readonly_fields = (
        "stage",
        "stage_reason",
        "soak_started_at",
        "soak_ended_at",
        "decided_at",
        "excluded_devices",
    )
    actions = ["start_soak", "evaluate", "admit", "fail", "rollback"]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        if obj is not None and obj.stage != GrayBatch.Stage.PLANNED:
            return (
                *self.readonly_fields,
                "name",
                "slug",
                "kind",
                "target_version",
                "criteria",
                "baseline_run",
                "nodes",
            )
        return self.readonly_fields

    def get_prepopulated_fields(self, request, obj=None):
        return {} if obj is not None and obj.stage != GrayBatch.Stage.PLANNED else self.prepopulated_fields

    def save_model(self, request, obj, form, change):
        cleaned = form.cleaned_data
        if change:
            values = {k: cleaned[k] for k in form.changed_data if k in services.BATCH_FIELDS}
            nodes = list(cleaned["nodes"]) if "nodes" in form.changed_data else None
            self._guard(
                request, lambda: services.batch_update(batch=obj, actor=request.user, nodes=nodes, **values)
            )
        else:
            values = {k: cleaned[k] for k in services.BATCH_FIELDS if k in cleaned}
            obj.pk = services.batch_create(actor=request.user, nodes=list(cleaned["nodes"]), **values).pk

    def save_related(self, request, form, formsets, change):
        """Nodes were saved by the service."""
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def delete_model(self, request, obj):
        self._guard(request, lambda: services.batch_delete(batch=obj, actor=request.user))

    @admin.action(description=_("Start the soak (gray pool, label and taint)"))
    def start_soak(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            lambda b: services.batch_soak_start(batch=b, actor=request.user),
            _("Soak started"),
        )

    @admin.action(description=_("Evaluate the soak now"))
    def evaluate(self, request, queryset):
        def run(batch):
            result = services.batch_evaluate(batch=batch, actor=request.user)
            self.message_user(request, f"{batch}: {result.get_verdict_display()}")

        run_each(self, request, queryset, run, _("Evaluated"))

    @admin.action(description=_("Admit to production"))
    def admit(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            lambda b: services.batch_admit(batch=b, actor=request.user),
            _("Admitted"),
        )

    @admin.action(description=_("Fail and quarantine"))
    def fail(self, request, queryset):
        reason = FAILED_BY % {"user": request.user}
        run_each(
            self,
            request,
            queryset,
            lambda b: services.batch_fail(batch=b, actor=request.user, reason=reason),
            _("Failed and quarantined"),
        )

    @admin.action(description=_("Roll back (change reverted)"))
    def rollback(self, request, queryset):
        reason = ROLLED_BACK_BY % {"user": request.user}

        def run(batch):
            done = services.batch_rollback(batch=batch, actor=request.user, reason=reason)
            for kept in done.quarantine_outcome["kept"]:  # say it: the node is still out of service
                self.message_user(
                    request,
                    _("Node %(node)s stays quarantined: %(why)s. Release it from the batch page.")
                    % {"node": kept["node"], "why": localize(kept["reason"])},
                    level=messages.WARNING,
                )

        run_each(self, request, queryset, run, _("Rolled back"))


@admin.register(SoakResult)
class SoakResultAdmin(admin.ModelAdmin):
    list_display = ("batch", "computed_at", "verdict", "soak_hours", "error_events", "max_temperature_c")
    list_filter = ("verdict",)
    list_select_related = ("batch",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(admin.ModelAdmin):
    list_display = ("name", "node", "batch", "throughput", "unit", "measured_at", "source")
    list_filter = ("name",)
    list_select_related = ("node", "batch")
    autocomplete_fields = ("node", "batch", "job")
    search_fields = ("name", "node__name")

    def save_model(self, request, obj, form, change):
        if change:
            messages.error(request, _("Benchmark runs are measurements; record a new run instead."))
            return
        values = {k: form.cleaned_data.get(k) for k in services.RUN_FIELDS}
        obj.pk = services.benchmark_run_record(actor=request.user, **values).pk


class UpgradeWaveInline(admin.TabularInline):
    model = UpgradeWave
    extra = 0
    fields = ("batch", "layer")
    readonly_fields = ("layer",)
    autocomplete_fields = ("batch",)


@admin.register(UpgradePlan)
class UpgradePlanAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    search_fields = ("name",)
    inlines = [UpgradeWaveInline]

    def save_formset(self, request, form, formset, change):
        for wave_form in formset.forms:
            if wave_form.cleaned_data.get("DELETE") or not wave_form.has_changed() or wave_form.instance.pk:
                continue
            try:
                services.upgrade_wave_create(
                    actor=request.user, plan=form.instance, batch=wave_form.cleaned_data["batch"]
                )
            except ApplicationError as exc:
                messages.error(request, exc.message)


@admin.register(UpgradeWave)
class UpgradeWaveAdmin(admin.ModelAdmin):
    list_display = ("plan", "layer", "batch", "state")
    list_filter = ("layer", "plan")
    list_select_related = ("plan", "batch")
    actions = ["start"]

    def has_add_permission(self, request):
        return False

    @admin.display(description=_("state"))
    def state(self, obj):
        return obj.state

    @admin.action(description=_("Start the wave (refused before earlier layers passed)"))
    def start(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            lambda w: services.upgrade_wave_start(wave=w, actor=request.user),
            _("Wave started"),
        )


class ScaleDecisionInline(admin.TabularInline):
    model = ScaleDecision
    extra = 0
    can_delete = False
    fields = ("created_at", "action", "from_replicas", "to_replicas", "reached_replicas", "reason", "error")
    readonly_fields = fields
    ordering = ("-created_at",)
    max_num = 0


@admin.register(AutoscalePolicy)
class AutoscalePolicyAdmin(_ServiceSaveMixin, admin.ModelAdmin):
    list_display = (
        "job",
        "enabled",
        "up_threshold_pct",
        "down_threshold_pct",
        "min_replicas",
        "max_replicas",
        "last_scaled_at",
        "last_reason",
    )
    list_filter = ("enabled",)
    list_select_related = ("job", "job__project")
    autocomplete_fields = ("job",)
    readonly_fields = ("last_scaled_at", "last_evaluated_at", "last_reason")
    inlines = [ScaleDecisionInline]
    actions = ["evaluate"]

    def save_model(self, request, obj, form, change):
        values = {k: form.cleaned_data[k] for k in services.POLICY_FIELDS if k in form.cleaned_data}
        if change:
            values.pop("job", None)
            self._guard(
                request, lambda: services.autoscale_policy_update(policy=obj, actor=request.user, **values)
            )
        else:
            obj.pk = services.autoscale_policy_create(actor=request.user, **values).pk

    def delete_model(self, request, obj):
        services.autoscale_policy_delete(policy=obj, actor=request.user)

    @admin.action(description=_("Evaluate now"))
    def evaluate(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            lambda p: services.autoscale_evaluate(policy=p, actor=request.user),
            _("Evaluated"),
        )


@admin.register(ScaleDecision)
class ScaleDecisionAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "job",
        "action",
        "from_replicas",
        "to_replicas",
        "reached_replicas",
        "reason",
    )
    list_filter = ("action",)
    list_select_related = ("job", "job__project")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
