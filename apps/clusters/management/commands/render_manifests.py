"""Write every object Suanchi would apply for scheduled / running jobs, one YAML file per object.

    python manage.py render_manifests (--job ID | --all) --out DIR

Objects: the project Namespaces and each job's group (``workload_objects``: batch/v1 Jobs — one
per replica of a gang, with its headless Service — or apps/v1 Deployments for inference services,
and the resource.k8s.io/v1 ResourceClaims / ResourceClaimTemplates of clusters in DRA mode); with
``--all`` also the DRA DeviceClasses and every node's labels and taints (the body of the Node
patch). Files are named ``<kind>-<namespace>-<name>.yaml`` (kind lower-case; cluster-scoped objects
use ``_cluster`` as the namespace part). For GitOps review and for tests.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Prefetch

from apps.clusters.manifests import device_class_manifests, namespace_manifest, node_patch, workload_objects
from apps.inventory.models import Node
from apps.jobs.models import ACTIVE_STATES, Allocation, Job


def manifest_filename(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind'].lower()}-{meta.get('namespace') or '_cluster'}-{meta['name']}.yaml"


class Command(BaseCommand):
    help = "Render the Kubernetes objects for scheduled / running jobs into a directory (one YAML each)."

    def add_arguments(self, parser):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--job", type=int, help="one job id")
        which.add_argument("--all", action="store_true", help="every scheduled or running job")
        parser.add_argument("--out", required=True, help="output directory (created if missing)")

    def handle(self, *args, **options):
        active = Allocation.objects.filter(released_at__isnull=True).select_related(
            "device", "node", "node__cluster"
        )
        jobs = (
            Job.objects.filter(state__in=ACTIVE_STATES)
            .select_related("project")
            .prefetch_related(Prefetch("allocations", queryset=active, to_attr="active_allocations"))
            .order_by("id")
        )
        if options["job"] is not None:
            jobs = jobs.filter(pk=options["job"])
            if not jobs.exists():
                raise CommandError(f"job {options['job']} does not exist or is not scheduled / running")

        objects: dict[str, dict] = {}
        skipped = 0
        for job in jobs:
            allocations = job.active_allocations
            if not allocations:
                skipped += 1
                continue
            cluster = allocations[0].node.cluster
            for obj in (
                namespace_manifest(job.project),
                *workload_objects(job, allocations, cluster, attempt=job.attempt),
            ):
                objects[manifest_filename(obj)] = obj
        if options["all"]:
            # The DeviceClasses the DRA claims name (also shipped in platform/kubernetes/dra/).
            for obj in device_class_manifests():
                objects[manifest_filename(obj)] = obj
            for node in Node.objects.exclude(status=Node.Status.RETIRED).order_by("name"):
                obj = node_patch(node)
                objects[manifest_filename(obj)] = obj

        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        for filename, obj in sorted(objects.items()):
            (out / filename).write_text(
                yaml.safe_dump(obj, sort_keys=False, allow_unicode=True), encoding="utf-8"
            )
        message = f"wrote {len(objects)} objects to {out}"
        if skipped:
            message += f" ({skipped} jobs without active allocations skipped)"
        self.stdout.write(message)
