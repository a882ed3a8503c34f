from django.urls import path

from apps.inventory import views

app_name = "inventory"

urlpatterns = [
    path("", views.fleet, name="fleet"),
]
