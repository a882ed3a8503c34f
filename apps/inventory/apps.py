from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "apps.inventory"
    label = "inventory"
    verbose_name = "Inventory (ledger)"

    def ready(self) -> None:
        from apps.core.stored_text import stored_vocabulary
        from apps.inventory import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from apps.inventory.models import Device, DeviceEvent, Node

        # Words that stored event texts carry as parameters, shown translated (apps.core.stored_text).
        for choices in (Device.PoolStatus, Device.Health, Node.Status, DeviceEvent.Severity):
            stored_vocabulary(choices)
