"""The queue board, mounted at /quotas/board/ (namespace "queueboard"; the view is
``apps.scheduling.board_views``: it reads the scheduler, a layer above quotas)."""

from django.urls import path

from apps.scheduling import board_views

app_name = "queueboard"

urlpatterns = [
    path("", board_views.board, name="board"),
]
