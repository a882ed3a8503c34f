from rest_framework.routers import DefaultRouter

from apps.accounts.api import views

router = DefaultRouter()
router.register("departments", views.DepartmentViewSet, basename="department")
router.register("projects", views.ProjectViewSet, basename="project")
router.register("tokens", views.ApiTokenViewSet, basename="api-token")
router.register("me", views.MeViewSet, basename="me")
urlpatterns = router.urls
