from rest_framework.routers import DefaultRouter

from apps.migration.api import views

router = DefaultRouter()
router.register("plans", views.MigrationPlanViewSet, basename="migration-plan")
router.register("phases", views.PlanPhaseViewSet, basename="migration-phase")
router.register("gates", views.GateViewSet, basename="migration-gate")
router.register("services", views.MigratedServiceViewSet, basename="migrated-service")
router.register("actions", views.MigrationActionViewSet, basename="migration-action")
router.register("service-metrics", views.ServiceMetricViewSet, basename="service-metric")
router.register("accuracy-evals", views.AccuracyEvalViewSet, basename="accuracy-eval")
router.register("dashboard", views.DashboardViewSet, basename="migration-dashboard")
urlpatterns = router.urls
