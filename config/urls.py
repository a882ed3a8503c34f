from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.core import views as core_views

admin.site.site_header = "Suanchi (算池) admin"
admin.site.login = core_views.admin_login  # rate-limited like the site's login
admin.site.site_title = "Suanchi admin"

urlpatterns = [
    path("", core_views.home, name="home"),
    path("healthz", core_views.healthz, name="healthz"),
    path("favicon.ico", core_views.favicon, name="favicon"),
    path("accounts/login/", core_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    path("api/", include("config.api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves the page's script from ?script (no inline script under the site's CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("inventory/", include("apps.inventory.urls")),
    path("clusters/", include("apps.clusters.urls")),
    path("catalog/library/", include("apps.benchlib.urls")),
    path("catalog/", include("apps.catalog.urls")),
    path("jobs/", include("apps.jobs.urls")),
    # The queue board reads the scheduler (a layer above quotas): its own URLconf, beside /quotas/.
    path("quotas/board/", include("apps.scheduling.board_urls")),
    path("quotas/", include("apps.quotas.urls")),
    path("telemetry/", include("apps.telemetry.urls")),
    path("billing/", include("apps.billing.urls")),
    path("rollout/", include("apps.rollout.urls")),
    path("migration/", include("apps.migration.urls")),
    path("notifications/", include("apps.notify.urls")),
    path("account/", include("apps.accounts.urls")),
    path("runs/", include("apps.core.urls")),
]
