from collections import defaultdict
from datetime import timedelta

from django.contrib import admin, messages
from django.db.models import Max, Min
from django.utils.translation import gettext_lazy as _

from apps.telemetry.models import DeviceRollup, JobUtilization, MetricSource
from apps.telemetry.windows import WINDOW_S

WINDOW = timedelta(seconds=WINDOW_S)  # a job utilization row's window


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

    def delete_model(self, request, obj):
        self.delete_queryset(request, DeviceRollup.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        """The rollups, then the fleet rollups, totals and card and node summaries of their windows
        summed again from those left (the report reads those)."""
        from apps.telemetry.rollups import fleet_rollups_rebuild

        touched = defaultdict(lambda: (set(), set()))
        for resolution, source, window, node_id in queryset.values_list(
            "resolution", "source", "window_start", "device__node_id"
        ).distinct():
            touched[(resolution, source)][0].add(window)
            touched[(resolution, source)][1].add(node_id)
        super().delete_queryset(request, queryset)
        for (resolution, source), (windows, node_ids) in touched.items():
            fleet_rollups_rebuild(
                resolution=resolution, source=source, windows=sorted(windows), node_ids=sorted(node_ids)
            )


@admin.register(JobUtilization)
class JobUtilizationAdmin(admin.ModelAdmin):
    list_display = ["job", "device", "window_start", "quality", "share", "busy_pct"]
    list_filter = ["quality"]
    raw_id_fields = ["job", "device"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def delete_model(self, request, obj):
        self.delete_queryset(request, JobUtilization.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        """The rows, then the job summaries of their hours summed again from those left (the report
        reads those)."""
        from apps.telemetry.attribution import job_summaries_rebuild

        spans = (
            queryset.order_by().values("source").annotate(first=Min("window_start"), last=Max("window_start"))
        )
        spans = list(spans)
        super().delete_queryset(request, queryset)
        for span in spans:
            job_summaries_rebuild(source=span["source"], start=span["first"], end=span["last"] + WINDOW)
