"""Billing pages, mounted at /billing/ (namespace "billing")."""

from django.urls import path

from apps.billing import views

app_name = "billing"

urlpatterns = [
    path("", views.bill_list, name="bills"),
    path("bills/<int:pk>/", views.bill_detail, name="bill-detail"),
    path("bills/<int:pk>/download/<str:fmt>/", views.bill_download, name="bill-download"),
    path("jobs/", views.job_costs, name="job-costs"),
    path("console/", views.console, name="console"),
    path("console/close/", views.console_close, name="console-close"),
    path("console/periods/<int:pk>/", views.period_progress, name="period-progress"),
    path("console/periods/<int:pk>/export.zip", views.period_export, name="period-export"),
    path("console/ledger/", views.ledger, name="ledger"),
    path("console/adjustments/", views.adjustments, name="adjustments"),
    path("console/rate-cards/", views.rate_cards, name="rate-cards"),
]
