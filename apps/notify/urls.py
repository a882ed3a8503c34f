"""Notification pages, mounted at /notifications/ (namespace "notify")."""

from django.urls import path

from apps.notify import views

app_name = "notify"

urlpatterns = [
    path("", views.subscriptions, name="subscriptions"),
    path("<int:pk>/delete/", views.subscription_delete, name="subscription-delete"),
    path("alerts/", views.alerts, name="alerts"),
    path("alerts/<int:pk>/delete/", views.alert_rule_delete, name="alert-rule-delete"),
]
