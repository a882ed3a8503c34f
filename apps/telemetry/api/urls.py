from rest_framework.routers import DefaultRouter

from apps.telemetry.api import views

router = DefaultRouter()
router.register("sources", views.MetricSourceViewSet, basename="metric-source")
router.register("rollups", views.DeviceRollupViewSet, basename="device-rollup")
router.register("scrapes", views.ScrapeViewSet, basename="scrape")
router.register("reports", views.ReportViewSet, basename="report")
router.register("jobs", views.JobUtilizationViewSet, basename="job-utilization")
router.register("projects", views.ProjectUtilizationViewSet, basename="project-utilization")
urlpatterns = router.urls
