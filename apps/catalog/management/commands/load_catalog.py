"""python manage.py load_catalog [--path FILE] [--json]: load the built-in device catalog (idempotent)."""

from apps.catalog.management.sync_command import SyncCommand
from apps.catalog.services import DEFAULT_CATALOG_PATH, catalog_sync


class Command(SyncCommand):
    help = "Upsert the built-in device models (and their default coefficients) from the catalog file."
    path_help = f"catalog file (default: {DEFAULT_CATALOG_PATH})"
    summary = (
        "device models: {created} created, {updated} updated, {unchanged} unchanged; "
        "{coefficients_created} default coefficients created"
    )

    def sync(self, *, path):
        return catalog_sync(actor="command:load_catalog", path=path)
