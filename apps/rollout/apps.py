from django.apps import AppConfig


class RolloutConfig(AppConfig):
    name = "apps.rollout"
    label = "rollout"
    verbose_name = "Rollout"
