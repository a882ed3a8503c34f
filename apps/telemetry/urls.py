"""Telemetry pages, mounted at /telemetry/ (namespace "telemetry")."""

from django.urls import path

from apps.telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("projects/<int:pk>/", views.project_detail, name="project-detail"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("backfills/<int:pk>/", views.backfill_progress, name="backfill"),
]
