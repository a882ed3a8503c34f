"""Catalog pages, mounted at /catalog/ (namespace "catalog")."""

from django.urls import path
from django.views.generic import RedirectView

from apps.catalog import views

app_name = "catalog"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="catalog:template-list", permanent=False), name="index"),
    path("models/", views.model_list, name="model-list"),
    path("templates/", views.template_list, name="template-list"),
    path("templates/new/", views.template_create, name="template-create"),
    path("templates/<int:pk>/", views.template_detail, name="template-detail"),
    path("templates/<int:pk>/edit/", views.template_edit, name="template-edit"),
    path("templates/<int:pk>/retire/", views.template_retire, name="template-retire"),
    path("request-templates/import/", views.request_template_import, name="request-template-import"),
    path("request-templates/<int:pk>/", views.request_template_detail, name="request-template-detail"),
]
