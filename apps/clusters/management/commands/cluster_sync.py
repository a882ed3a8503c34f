"""``python manage.py cluster_sync --cluster SLUG [--from-file nodes.yaml [--from-file slices.yaml]]
[--dry-run] [--json]``: sync Kubernetes Nodes / ResourceSlices into the ledger.

Without ``--from-file`` it reads the live cluster through its backend; with it, the files (a
``NodeList`` / ``ResourceSliceList`` as the API returns it, or ``kubectl get ... -o yaml``'s
``kind: List``) stand in for the API. Bad input is a ``CommandError`` naming the problem, with
nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from apps.clusters.backends.errors import BackendError
from apps.clusters.sync import cluster_sync, cluster_sync_apply, sync_input_load
from apps.core.errors import ApplicationError
from apps.inventory.models import Cluster


class Command(BaseCommand):
    help = "Sync a cluster's Kubernetes Nodes and DRA ResourceSlices into the ledger (drift becomes events)."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="the cluster's slug")
        parser.add_argument(
            "--from-file",
            action="append",
            default=[],
            metavar="FILE",
            help="a NodeList / ResourceSliceList / kind: List (YAML or JSON) instead of the live API; repeatable",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what a sync would do; write nothing"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options):
        try:
            cluster = Cluster.objects.get(slug=options["cluster"])
        except Cluster.DoesNotExist:
            known = ", ".join(Cluster.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(f"no cluster {options['cluster']!r} (known: {known})") from None
        try:
            if options["from_file"]:
                nodes: list[dict] = []
                slices: list[dict] | None = None
                for name in options["from_file"]:
                    path = Path(name)
                    try:
                        text = path.read_bytes()
                    except OSError as e:
                        raise CommandError(f"cannot read {name}: {e.strerror or e}") from e
                    loaded = sync_input_load(text, source=name)
                    nodes += loaded["nodes"]
                    if loaded["slices"] or (slices is None and not loaded["nodes"]):
                        slices = (slices or []) + loaded["slices"]
                if not nodes:
                    raise CommandError("no Node in the files: give the NodeList (kubectl get nodes -o yaml)")
                report = cluster_sync_apply(
                    cluster=cluster,
                    nodes=nodes,
                    slices=slices,
                    dry_run=options["dry_run"],
                    actor="cluster-sync",
                )
            else:
                if options["dry_run"]:
                    from apps.clusters.sync import cluster_read

                    live_nodes, live_slices = cluster_read(cluster)
                    report = cluster_sync_apply(
                        cluster=cluster,
                        nodes=live_nodes,
                        slices=live_slices,
                        dry_run=True,
                        actor="cluster-sync",
                    )
                else:
                    report = cluster_sync(cluster=cluster, actor="cluster-sync")
        except ApplicationError as e:
            raise CommandError(e.message) from e
        except BackendError as e:
            raise CommandError(f"cluster {cluster.slug}: {e.message}") from e
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
            return
        prefix = "[dry run] " if report.dry_run else ""
        self.stdout.write(
            f"{prefix}{cluster.slug}: {len(report.nodes)} nodes ({len(report.created_nodes)} new, "
            f"{report.created_devices} cards), {len(report.slices)} slice devices, "
            f"{len(report.drift)} drift, {report.events} events, {report.patches} node patches queued"
        )
        for item in report.drift:
            self.stdout.write(f"  drift {item['node']}: {item.get('message') or item['drift']}")
