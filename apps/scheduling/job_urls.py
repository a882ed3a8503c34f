"""Job pages, mounted at /jobs/ (namespace "jobs"; the views are ``apps.scheduling.job_views``)."""

from django.urls import path

from apps.scheduling import job_views as views
from apps.scheduling import live

app_name = "jobs"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("live/", live.job_states, name="live"),
    path("submit/", views.job_submit, name="submit"),
    path("cancel/", views.job_bulk_cancel, name="bulk-cancel"),
    path("submit/preview/", views.job_submit_preview, name="submit-preview"),
    path("<int:pk>/", views.job_detail, name="detail"),
    path("<int:pk>/pod/", views.job_pod, name="pod"),
    path("runbook/", views.runbook, name="runbook"),
    path("<int:pk>/cancel/", views.job_cancel, name="cancel"),
]
