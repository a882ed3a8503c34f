"""Benchmark library pages, mounted at /catalog/library/ (namespace "benchlib")."""

from django.urls import path

from apps.benchlib import views

app_name = "benchlib"

urlpatterns = [path("", views.library, name="library")]
