from django.urls import path

from apps.core import views

app_name = "core"

urlpatterns = [
    path("<int:pk>/", views.run_progress_json, name="run-progress"),
]
