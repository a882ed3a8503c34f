"""Billing pages, mounted at /billing/ (namespace "billing")."""

app_name = "billing"

urlpatterns = []
