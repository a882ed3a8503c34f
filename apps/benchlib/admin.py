from django.contrib import admin

from apps.benchlib.models import CoefficientProposal, Measurement
from apps.core.admin import ReadOnlyAdminMixin


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
        "measured_at",
    ]
    list_filter = ["profile", "synthetic", "source", "device_model__vendor"]
    search_fields = ["device_model__name", "profile__key", "source_label"]
    date_hierarchy = "measured_at"


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
