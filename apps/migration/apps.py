from django.apps import AppConfig


class MigrationConfig(AppConfig):
    name = "apps.migration"
    label = "migration"
    verbose_name = "Migration"
