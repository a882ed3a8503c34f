"""Telemetry pages, mounted at /telemetry/ (namespace "telemetry")."""

app_name = "telemetry"

urlpatterns = []
