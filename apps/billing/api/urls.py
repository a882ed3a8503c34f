from rest_framework.routers import DefaultRouter

from apps.billing.api import views

router = DefaultRouter()
router.register("rate-cards", views.RateCardViewSet, basename="rate-card")
router.register("usage-entries", views.UsageEntryViewSet, basename="usage-entry")
router.register("bills", views.BillViewSet, basename="bill")
router.register("adjustments", views.AdjustmentViewSet, basename="adjustment")
router.register("periods", views.BillingPeriodViewSet, basename="period")
urlpatterns = router.urls
