"""The job API, mounted at /api/jobs/ (``config.api``): /api/jobs/jobs/ and its actions."""

from rest_framework.routers import DefaultRouter

from apps.jobs.api import views

router = DefaultRouter()
router.register("jobs", views.JobViewSet, basename="job")
urlpatterns = router.urls
