"""The job API, mounted at /api/jobs/ (``config.api``): /api/jobs/jobs/ and its actions."""

from rest_framework.routers import DefaultRouter

from apps.scheduling.api import jobs

router = DefaultRouter()
router.register("jobs", jobs.JobViewSet, basename="job")
urlpatterns = router.urls
