from rest_framework.routers import DefaultRouter

from apps.catalog.api import views

router = DefaultRouter()
router.register("device-models", views.DeviceModelViewSet, basename="device-model")
router.register("compute-coefficients", views.ComputeCoefficientViewSet, basename="compute-coefficient")
router.register("compute-templates", views.ComputeTemplateViewSet, basename="compute-template")
router.register("request-templates", views.DeviceRequestTemplateViewSet, basename="request-template")
urlpatterns = router.urls
