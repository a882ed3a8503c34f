from django.contrib import admin

from apps.telemetry.models import DeviceRollup, JobUtilization, MetricSource


@admin.register(MetricSource)
class MetricSourceAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "kind", "url", "enabled", "ingested_until", "last_run_at"]
    list_filter = ["kind", "enabled", "cluster"]
    readonly_fields = ["ingested_until", "last_run_at", "last_error", "last_report"]
    search_fields = ["name", "url"]

    def save_model(self, request, obj, form, change):
        from apps.telemetry import services

        fields = {k: form.cleaned_data[k] for k in services._SOURCE_FIELDS if k in form.cleaned_data}
        if change:
            services.metric_source_update(actor=request.user, source=obj, **fields)
        else:
            created = services.metric_source_create(actor=request.user, **fields)
            obj.pk = created.pk


@admin.register(DeviceRollup)
class DeviceRollupAdmin(admin.ModelAdmin):
    list_display = [
        "device",
        "partition",
        "resolution",
        "window_start",
        "source",
        "quality",
        "sample_count",
        "util_avg",
    ]
    list_filter = ["resolution", "quality", "source"]
    raw_id_fields = ["device"]
    date_hierarchy = "window_start"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(JobUtilization)
class JobUtilizationAdmin(admin.ModelAdmin):
    list_display = ["job", "device", "window_start", "quality", "share", "busy_pct"]
    list_filter = ["quality"]
    raw_id_fields = ["job", "device"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
