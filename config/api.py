"""The API root: /api/<app>/<plural-kebab>/."""

from django.urls import include, path

from apps.benchlib.api.views import RecommendationView

urlpatterns = [
    path("accounts/", include("apps.accounts.api.urls")),
    path("catalog/recommendations/", RecommendationView.as_view(), name="recommendations"),
    path("catalog/", include("apps.catalog.api.urls")),
    path("benchlib/", include("apps.benchlib.api.urls")),
    path("inventory/", include("apps.inventory.api.urls")),
    path("jobs/", include("apps.jobs.api.urls")),
    path("quotas/", include("apps.quotas.api.urls")),
    path("telemetry/", include("apps.telemetry.api.urls")),
    path("billing/", include("apps.billing.api.urls")),
    path("rollout/", include("apps.rollout.api.urls")),
    path("migration/", include("apps.migration.api.urls")),
]
