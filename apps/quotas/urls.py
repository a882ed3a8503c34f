"""Quotas pages, mounted at /quotas/ (namespace "quotas")."""

from django.urls import path

from apps.quotas import views

app_name = "quotas"

urlpatterns = [
    path("", views.quota_overview, name="overview"),
    path("<int:pk>/edit/", views.quota_edit, name="edit"),
]
