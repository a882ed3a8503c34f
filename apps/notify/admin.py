from django.contrib import admin

from apps.core.admin import ReadOnlyAdminMixin
from apps.notify.models import Alert, AlertRule, Delivery, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["owner", "project", "channel", "target", "active", "created_at"]
    list_filter = ["channel", "active"]
    search_fields = ["target", "owner__username", "project__slug"]
    exclude = ["secret"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "created_at",
        "event",
        "subscription",
        "state",
        "attempts",
        "response_status",
        "last_error",
    ]
    list_filter = ["state", "event"]


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "kind",
        "threshold",
        "duration_s",
        "clear_margin",
        "project",
        "cluster",
        "enabled",
    ]
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["rule", "subject_label", "state", "value", "since", "fired_at", "resolved_at"]
    list_filter = ["state", "rule__kind"]
