"""Rollout pages, mounted at /rollout/ (namespace "rollout")."""

app_name = "rollout"

urlpatterns = []
