from rest_framework.routers import DefaultRouter

from apps.inventory.api import views

router = DefaultRouter()
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("pools", views.PoolViewSet, basename="pool")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("devices", views.DeviceViewSet, basename="device")
router.register("device-events", views.DeviceEventViewSet, basename="device-event")
router.register("node-reports", views.NodeReportViewSet, basename="node-report")
urlpatterns = router.urls
