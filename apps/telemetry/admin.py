from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _

from apps.telemetry.models import DeviceRollup, JobUtilization, MetricSource


@admin.register(MetricSource)
class MetricSourceAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "kind", "url", "enabled", "ingested_until", "last_run_at"]
    actions = ["backfill_last_day"]

    @admin.action(description=_("Backfill the last 24 hours (with progress)"))
    def backfill_last_day(self, request, queryset):
        from datetime import timedelta

        from django.http import HttpResponseRedirect
        from django.urls import reverse
        from django.utils import timezone

        from apps.core.errors import ApplicationError
        from apps.telemetry import metric_sources

        end = timezone.now()
        runs = []
        for source in queryset:
            try:
                runs.append(
                    metric_sources.backfill_request(
                        source=source, start=end - timedelta(hours=24), end=end, actor=request.user
                    )
                )
            except ApplicationError as exc:
                self.message_user(request, exc.message, messages.ERROR)
        if len(runs) == 1:
            return HttpResponseRedirect(reverse("telemetry:backfill", args=[runs[0].pk]))
        if runs:
            self.message_user(request, _("%(n)d backfills queued.") % {"n": len(runs)}, messages.SUCCESS)
        return None

    list_filter = ["kind", "enabled", "cluster"]
    readonly_fields = ["ingested_until", "last_run_at", "last_error", "last_report"]
    search_fields = ["name", "url"]

    def save_model(self, request, obj, form, change):
        from apps.telemetry import metric_sources

        fields = {k: form.cleaned_data[k] for k in metric_sources._SOURCE_FIELDS if k in form.cleaned_data}
        if change:
            metric_sources.metric_source_update(actor=request.user, source=obj, **fields)
        else:
            created = metric_sources.metric_source_create(actor=request.user, **fields)
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
