from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "apps.inventory"
    label = "inventory"
    verbose_name = "Inventory (ledger)"

    def ready(self) -> None:
        from apps.inventory import schema  # noqa: F401  (registers the OpenAPI auth extension)
