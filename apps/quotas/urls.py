"""Quotas pages, mounted at /quotas/ (namespace "quotas")."""

app_name = "quotas"

urlpatterns = []
