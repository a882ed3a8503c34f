from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from apps.benchlib import services
from apps.benchlib.models import CoefficientProposal, Measurement
from apps.core.admin import ReadOnlyAdminMixin, run_each


@admin.register(Measurement)
class MeasurementAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "profile",
        "device_model",
        "template",
        "compute_share",
        "cards",
        "throughput",
        "synthetic",
        "source",
        "verified_at",
        "measured_at",
    ]
    list_filter = ["profile", "synthetic", "source", "device_model__vendor"]
    search_fields = ["device_model__name", "profile__key", "source_label"]
    date_hierarchy = "measured_at"
    actions = ["verify"]

    @admin.action(description=_("Verify the selected job reports (they then count fleet-wide)"))
    def verify(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            lambda m: services.measurement_verify(measurement=m, actor=request.user),
            str(_("verified")),
        )


@admin.register(CoefficientProposal)
class CoefficientProposalAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "device_model",
        "current_value",
        "proposed_value",
        "state",
        "effective_from",
        "created_at",
    ]
    list_filter = ["state"]
