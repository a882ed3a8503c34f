"""Migration pages, mounted at /migration/ (namespace "migration")."""

from django.urls import path

from apps.migration import views

app_name = "migration"

urlpatterns = [
    path("", views.cockpit, name="cockpit"),
    path("services/<int:pk>/", views.service_detail, name="service-detail"),
    path("services/<int:pk>/shift/", views.service_shift, name="service-shift"),
    path("services/<int:pk>/rollback/", views.service_rollback, name="service-rollback"),
    path("services/<int:pk>/promote/", views.service_promote, name="service-promote"),
    path(
        "proposals/<int:pk>/<str:verb>/",
        views.proposal_decide,
        name="proposal-decide",
    ),
    path("export/services.csv", views.export_services, name="export-services"),
    path("export/vendor-share.csv", views.export_vendor_share, name="export-vendor-share"),
]
