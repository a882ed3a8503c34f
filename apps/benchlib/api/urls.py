from rest_framework.routers import DefaultRouter

from apps.benchlib.api import views

router = DefaultRouter()
router.register("measurements", views.MeasurementViewSet, basename="measurement")
router.register("coefficient-proposals", views.CoefficientProposalViewSet, basename="coefficient-proposal")
urlpatterns = router.urls
