"""Job pages, mounted at /jobs/ (namespace "jobs"; the views are ``apps.jobs.views``)."""

from django.urls import path

from apps.jobs.views import detail, listing, live, submit

app_name = "jobs"

urlpatterns = [
    path("", listing.job_list, name="list"),
    path("live/", live.job_states, name="live"),
    path("submit/", submit.job_submit, name="submit"),
    path("cancel/", listing.job_bulk_cancel, name="bulk-cancel"),
    path("submit/preview/", submit.job_submit_preview, name="submit-preview"),
    path("<int:pk>/", detail.job_detail, name="detail"),
    path("<int:pk>/pod/", detail.job_pod, name="pod"),
    path("runbook/", detail.runbook, name="runbook"),
    path("<int:pk>/cancel/", detail.job_cancel, name="cancel"),
]
