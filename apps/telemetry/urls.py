"""Telemetry pages, mounted at /telemetry/ (namespace "telemetry")."""

from django.urls import path

from apps.telemetry import history_views, views

app_name = "telemetry"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("projects/<int:pk>/", views.project_detail, name="project-detail"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("backfills/<int:pk>/", views.backfill_progress, name="backfill"),
    path("devices/<int:pk>/history/", history_views.device_history_data, name="device-history"),
    path("nodes/<int:pk>/history/", history_views.node_history_data, name="node-history"),
]
