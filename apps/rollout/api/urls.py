from rest_framework.routers import DefaultRouter

from apps.rollout.api import views

router = DefaultRouter()
router.register("soak-criteria", views.SoakCriteriaViewSet, basename="soak-criteria")
router.register("batches", views.GrayBatchViewSet, basename="batch")
router.register("soak-results", views.SoakResultViewSet, basename="soak-result")
router.register("benchmark-runs", views.BenchmarkRunViewSet, basename="benchmark-run")
router.register("upgrade-plans", views.UpgradePlanViewSet, basename="upgrade-plan")
router.register("upgrade-waves", views.UpgradeWaveViewSet, basename="upgrade-wave")
router.register("autoscale-policies", views.AutoscalePolicyViewSet, basename="autoscale-policy")
router.register("scale-decisions", views.ScaleDecisionViewSet, basename="scale-decision")
urlpatterns = router.urls
