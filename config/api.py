"""The API root: /api/<app>/<plural-kebab>/."""

from django.urls import include, path

urlpatterns = [
    path("accounts/", include("apps.accounts.api.urls")),
    path("catalog/", include("apps.catalog.api.urls")),
    path("inventory/", include("apps.inventory.api.urls")),
    path("jobs/", include("apps.scheduling.api.job_urls")),
    path("quotas/", include("apps.quotas.api.urls")),
    path("telemetry/", include("apps.telemetry.api.urls")),
    path("billing/", include("apps.billing.api.urls")),
    path("rollout/", include("apps.rollout.api.urls")),
    path("migration/", include("apps.migration.api.urls")),
]
