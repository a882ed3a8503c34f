"""python manage.py load_workload_profiles [--path FILE] [--json]: load the built-in workload profiles."""

from apps.catalog.management.sync_command import SyncCommand
from apps.catalog.workloads import DEFAULT_PROFILES_PATH, workload_profile_sync


class Command(SyncCommand):
    help = "Upsert the built-in workload profiles (benchmark library) from the profiles file."
    path_help = f"profiles file (default: {DEFAULT_PROFILES_PATH.name})"
    summary = "workload profiles: {created} created, {updated} updated, {unchanged} unchanged"

    def sync(self, *, path):
        return workload_profile_sync(actor="command:load_workload_profiles", path=path)
