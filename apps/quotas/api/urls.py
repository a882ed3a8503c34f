from rest_framework.routers import DefaultRouter

from apps.quotas.api.views import QuotaViewSet

router = DefaultRouter()
router.register("quotas", QuotaViewSet, basename="quota")
urlpatterns = router.urls
