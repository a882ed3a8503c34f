from django.urls import path

from apps.inventory import event_views, views

app_name = "inventory"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("live/", views.fleet_live, name="fleet-live"),
    path("events/", event_views.event_list, name="event-list"),
    path("nodes/", views.node_list, name="node-list"),
    path("nodes/<int:pk>/", views.node_detail, name="node-detail"),
    path("nodes/<int:pk>/actions/", views.node_action, name="node-action"),
    path("devices/", views.device_list, name="device-list"),
    path("devices/<int:pk>/", views.device_detail, name="device-detail"),
]
