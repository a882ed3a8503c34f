from django.urls import path

from apps.clusters import views

app_name = "clusters"

urlpatterns = [
    path("", views.cluster_list, name="list"),
    path("new/", views.cluster_create, name="create"),
    path("<slug:slug>/", views.cluster_detail, name="detail"),
    path("<slug:slug>/edit/", views.cluster_edit, name="edit"),
    path("<slug:slug>/test/", views.cluster_test, name="test"),
    path("<slug:slug>/sync/", views.cluster_sync_now, name="sync"),
]
