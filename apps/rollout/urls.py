"""Rollout pages, mounted at /rollout/ (namespace "rollout")."""

from django.urls import path

from apps.rollout import views

app_name = "rollout"

urlpatterns = [
    path("", views.batch_list, name="batch-list"),
    path("batches/<int:pk>/", views.batch_detail, name="batch-detail"),
    path("batches/<int:pk>/live/", views.batch_live, name="batch-live"),
    path("batches/<int:pk>/release-node/", views.batch_node_release, name="batch-node-release"),
    path("waves/", views.wave_list, name="waves"),
    path("autoscaling/", views.autoscaling, name="autoscaling"),
]
