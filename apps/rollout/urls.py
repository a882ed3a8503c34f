"""Rollout pages, mounted at /rollout/ (namespace "rollout")."""

from django.urls import path

from apps.rollout import views

app_name = "rollout"

urlpatterns = [
    path("", views.batch_list, name="batch-list"),
    path("batches/new/", views.batch_create, name="batch-create"),
    path("batches/live/", views.batch_list_live, name="batch-list-live"),
    path("batches/<int:pk>/", views.batch_detail, name="batch-detail"),
    path("batches/<int:pk>/live/", views.batch_live, name="batch-live"),
    path("batches/<int:pk>/release-node/", views.batch_node_release, name="batch-node-release"),
    path("batches/<int:pk>/actions/<slug:action>/", views.batch_action, name="batch-action"),
    path("nodes/", views.node_search, name="node-search"),
    path("waves/", views.wave_list, name="waves"),
    path("waves/plans/new/", views.plan_create, name="plan-create"),
    path("waves/new/", views.wave_create, name="wave-create"),
    path("waves/<int:pk>/start/", views.wave_start, name="wave-start"),
    path("autoscaling/", views.autoscaling, name="autoscaling"),
]
